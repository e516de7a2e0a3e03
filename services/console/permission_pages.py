"""A user's tool-permission rules (list, add, delete) and "would this tool call
run?": the permissions routes of the API, through its own client."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console import session
from services.console.app import client, page
from shared.client import models as m

router = APIRouter(include_in_schema=False)
PERMISSIONS = f"{session.PREFIX}/permissions"
Text = Annotated[str, Query(max_length=500)]


@router.get(PERMISSIONS, response_class=HTMLResponse)
async def permissions(request: Request, user: Text = "", project: Text = "") -> HTMLResponse:
    return await _page(request, user, project)


@router.post(PERMISSIONS + "/rules")
async def add_rule(request: Request) -> Response:
    form = await session.checked_form(request)
    user, project = _text(form, "user_id"), _text(form, "project_id") or "global"
    async with client(request) as api:
        await api.add_rule(
            user,
            _text(form, "tool_name"),
            _text(form, "pattern"),
            _text(form, "action"),
            project_id=project,
        )
    return _back(user, project)


@router.post(PERMISSIONS + "/rules/{rule_id}/delete")
async def delete_rule(request: Request, rule_id: str) -> Response:
    form = await session.checked_form(request)
    user = _text(form, "user_id")
    async with client(request) as api:
        await api.delete_rule(rule_id, user_id=user)
    return _back(user, _text(form, "project_id"))


@router.post(PERMISSIONS + "/evaluate", response_class=HTMLResponse)
async def evaluate(request: Request) -> HTMLResponse:
    # A POST: evaluating consumes an allow-once grant.
    form = await session.checked_form(request)
    user, project = _text(form, "user_id"), _text(form, "project_id")
    raw = _text(form, "tool_args") or "{}"
    args = _arguments(raw)
    async with client(request) as api:
        verdict = await api.evaluate_permission(
            user,
            _text(form, "session_id") or "console",
            _text(form, "tool_name"),
            args,
            project_id=project or None,
        )
    asked = {"tool_name": _text(form, "tool_name"), "tool_args": raw}
    return await _page(request, user, project, verdict=verdict, asked=asked)


async def _page(
    request: Request,
    user: str,
    project: str,
    verdict: m.EvaluateResponse | None = None,
    asked: dict[str, str] | None = None,
) -> HTMLResponse:
    rules: list[m.RuleView] | None = None
    if user:
        async with client(request) as api:
            rules = await api.rules(user, project_id=project or None)
    return page(
        request,
        "permissions.html",
        user=user,
        project=project,
        rules=rules,
        verdict=verdict,
        asked=asked or {"tool_name": "", "tool_args": "{}"},
    )


def _arguments(raw: str) -> dict[str, Any]:
    """The call's arguments: a JSON object the API can be sent (no NaN, no lone
    surrogate); Refused(422) naming the field if not."""
    try:
        args = json.loads(raw, parse_constant=_no_constant)
        json.dumps(args, allow_nan=False, ensure_ascii=False).encode()
    except (ValueError, RecursionError, UnicodeEncodeError) as exc:
        raise session.Refused(422, f"tool_args: not JSON the API takes ({exc})") from None
    if not isinstance(args, dict):
        raise session.Refused(422, "tool_args: a JSON object of the call's arguments")
    return args


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _text(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _back(user: str, project: str) -> Response:
    query = urlencode({"user": user, "project": project if project != "global" else ""})
    return RedirectResponse(f"{PERMISSIONS}?{query}", status_code=303)
