"""Signing in and out, and the overview: each subscription's backlog, oldest
unsettled message, dead letters and rate, with their last hour charted, and each
worker kind's replicas.

The overview's figures are the ones the processes report through Valkey
(shared.bus.overview), and their samples the API takes (shared.bus.figure_history);
the dead letters are counted as `agent-memory dlq list` counts them
(services.console.sources).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.api.auth import lookup_key, within
from services.console import access
from services.console.chart import chart
from services.console.pages import Viewer, page, require_admin
from services.console.sources import sources
from shared.api_keys import key_hash
from shared.bus.figure_history import read_history
from shared.bus.overview import read_overview

router = APIRouter(include_in_schema=False)
MAX_KEY_LENGTH = 512


@router.get(access.SIGN_IN, response_class=HTMLResponse)
async def sign_in_page(request: Request) -> HTMLResponse:
    target = access.local_target(_given(request.query_params.get("next")))
    return page(request, "sign_in.html", next=target, problem=None)


@router.post(access.SIGN_IN, response_class=HTMLResponse)
async def sign_in(request: Request) -> Response:
    # No key yet to bind a token to: the browser's word on the origin is the guard.
    form = await access.checked_form(request, token=False)
    key = _given(form.get("key")).strip()
    target = access.local_target(_given(form.get("next")))
    api = request.app.state.api
    problem = None
    # A key is printable ASCII (shared.api_keys): nothing else goes into the cookie.
    if not key or len(key) > MAX_KEY_LENGTH or not (key.isascii() and key.isprintable()):
        problem = "key: enter an API key of your app"
    elif not api.settings.auth_disabled:
        try:
            found = await within(
                lookup_key(request.app.state.apool, key_hash(key)),
                api.settings.auth_lookup_timeout_seconds,
            )
        except Exception:  # noqa: BLE001 - Postgres down or slow: say so, keep the form
            return page(
                request, "sign_in.html", 503, next=target, problem="keys cannot be checked now"
            )
        if found is None:
            problem = "key: invalid or revoked API key"
    if problem:
        return page(request, "sign_in.html", 401, next=target, problem=problem)
    response = RedirectResponse(target, status_code=303)
    access.sign_in(response, request, key)
    return response


@router.post(f"{access.PREFIX}/sign-out")
async def sign_out(request: Request) -> Response:
    await access.checked_form(request)
    response = RedirectResponse(access.SIGN_IN, status_code=303)
    access.sign_out(response, request.scope)
    return response


@router.get(access.PREFIX, response_class=HTMLResponse)
async def overview(request: Request) -> HTMLResponse:
    if not Viewer(request).admin:
        # The pipeline's figures span every app: an operator's, like the dead letters.
        return page(request, "overview.html", overview=None, interval=_interval(request))
    return page(request, "overview.html", **await _figures(request))


@router.get(f"{access.PREFIX}/figures", response_class=HTMLResponse)
async def figures(request: Request) -> HTMLResponse:
    """The overview's tables and chart alone: what the page fetches every few seconds."""
    require_admin(Viewer(request))
    return page(request, "_figures.html", **await _figures(request))


def _interval(request: Request) -> float:
    """How often the processes report: a replica silent for two of them is shown so."""
    return request.app.state.api.settings.figures_interval_seconds


def _given(value: object) -> str:
    return value if isinstance(value, str) else ""


async def _figures(request: Request) -> dict[str, Any]:
    """What the overview shows: the figures now, the dead letters, the last hour."""
    found = await sources(request)
    figures, dead, history = await asyncio.gather(
        run_in_threadpool(read_overview, found.valkey, found.settings),
        run_in_threadpool(found.dead_letters),
        run_in_threadpool(read_history, found.valkey, found.settings),
    )
    names = [s.subscription for s in figures.subscriptions]
    return {
        "overview": figures,
        "dead": dead,
        "interval": _interval(request),
        "chart": chart(history, names),
        "step": history.step,
    }
