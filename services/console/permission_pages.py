"""A user's tool-permission rules (list, add, delete) and "would this tool call
run?": the permissions routes of the API, through its own client."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console import access, inputs, queries
from services.console.pages import client, page
from shared.client import models as m
from shared.permissions import MAX_PATTERN_LENGTH

router = APIRouter(include_in_schema=False)
PERMISSIONS = f"{access.PREFIX}/permissions"
ACTIONS = ("ALLOW", "BLOCK")
MAX_ARGUMENTS = 64 * 1024  # characters of a would-it-run check's arguments


@router.get(PERMISSIONS, response_class=HTMLResponse)
async def permissions(request: Request) -> HTMLResponse:
    query = request.query_params
    user = inputs.identifier(query, "user", required=False)
    project = inputs.identifier(query, "project", required=False)
    return await _page(request, user, project)


@router.post(PERMISSIONS + "/rules")
async def add_rule(request: Request) -> Response:
    form = await access.checked_form(request)
    user = inputs.identifier(form, "user_id")
    project = inputs.identifier(form, "project_id", required=False) or "global"
    tool = inputs.identifier(form, "tool_name")
    pattern = inputs.text(form, "pattern", required=True, limit=MAX_PATTERN_LENGTH)
    action = inputs.choice(form, "action", ACTIONS)
    if not action:
        raise access.Refused(422, "action: is required")
    async with client(request) as api:
        await api.add_rule(user, tool, pattern, action, project_id=project)
    return _back(user, project)


@router.post(PERMISSIONS + "/rules/{rule_id}/delete")
async def delete_rule(request: Request, rule_id: str) -> Response:
    form = await access.checked_form(request)
    user = inputs.identifier(form, "user_id")
    if queries.event_uuid(rule_id) is None:
        raise access.Refused(422, "rule_id: a rule id is a UUID")
    project = inputs.identifier(form, "project_id", required=False)
    async with client(request) as api:
        await api.delete_rule(rule_id, user_id=user)
    return _back(user, project)


@router.post(PERMISSIONS + "/evaluate", response_class=HTMLResponse)
async def evaluate(request: Request) -> HTMLResponse:
    # A POST: evaluating consumes an allow-once grant.
    form = await access.checked_form(request)
    user = inputs.identifier(form, "user_id")
    project = inputs.identifier(form, "project_id", required=False)
    session_id = inputs.identifier(form, "session_id", required=False) or "console"
    tool = inputs.identifier(form, "tool_name")
    raw = inputs.text(form, "tool_args", limit=MAX_ARGUMENTS) or "{}"
    args = _arguments(raw)
    async with client(request) as api:
        verdict = await api.evaluate_permission(
            user, session_id, tool, args, project_id=project or None
        )
    asked = {"tool_name": tool, "tool_args": raw}
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
        raise access.Refused(422, f"tool_args: not JSON the API takes ({exc})") from None
    if not isinstance(args, dict):
        raise access.Refused(422, "tool_args: a JSON object of the call's arguments")
    return args


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _back(user: str, project: str) -> Response:
    query = urlencode({"user": user, "project": project if project != "global" else ""})
    return RedirectResponse(f"{PERMISSIONS}?{query}", status_code=303)
