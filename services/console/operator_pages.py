"""Dead letters and an event's trail.

The dead letters are an operator's: every subscription's, of every app, so only
an admin key sees them. Replay and purge are `agent-memory dlq replay|purge`'s
own code (shared.bus.replay, shared.bus.dlq) for the letters ticked, on the one
subscription shown; a purge asks for a confirmation first.

An event's trail is what Postgres knows of it within the viewer's app
(services.console.queries) and, for an admin key, the dead-letter subscriptions
holding it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from services.console import queries, session
from services.console.app import Viewer, page, require_admin
from services.console.sources import sources
from shared.bus.dlq import DeadLetter, MissingEvents
from shared.bus.replay import ReplayFilter, replay
from shared.bus.topology import SUBSCRIPTIONS

router = APIRouter(include_in_schema=False)
DEAD = f"{session.PREFIX}/dead-letters"
SHOWN = 100  # the oldest letters listed for a subscription
NAMES = tuple(spec.name for spec in SUBSCRIPTIONS)


@router.get(DEAD, response_class=HTMLResponse)
async def dead_letters(
    request: Request, subscription: Annotated[str, Query(max_length=100)] = ""
) -> HTMLResponse:
    require_admin(Viewer(request))
    return await _dead_letters_page(request, subscription or NAMES[0], None)


@router.post(DEAD + "/{subscription}/replay", response_class=HTMLResponse)
async def replay_letters(request: Request, subscription: str) -> HTMLResponse:
    form = await session.checked_form(request)
    require_admin(Viewer(request))
    name = _known(subscription)
    ids = _event_ids(form.getlist("event_id"))
    found = await sources(request)
    try:
        result = await run_in_threadpool(
            replay, found.queues, name, ReplayFilter(event_ids=frozenset(ids))
        )
    except MissingEvents as exc:
        return await _dead_letters_page(request, name, str(exc), status=409)
    found.forget_counts()
    outcome = result.summary()
    if result.error is not None:
        outcome += f"; Pub/Sub failed: {result.error}"
    return await _dead_letters_page(request, name, outcome)


@router.post(DEAD + "/{subscription}/purge", response_class=HTMLResponse)
async def purge_letters(request: Request, subscription: str) -> HTMLResponse:
    form = await session.checked_form(request)
    require_admin(Viewer(request))
    name = _known(subscription)
    ids = _event_ids(form.getlist("event_id"))
    confirmed = form.get("confirm") == "yes"
    found = await sources(request)
    shown: list[DeadLetter] = []
    try:
        count = await run_in_threadpool(found.queues.purge, name, ids, confirmed, shown.append)
    except MissingEvents as exc:
        return await _dead_letters_page(request, name, str(exc), status=409)
    if not confirmed:
        return page(request, "purge_confirm.html", subscription=name, letters=shown)
    found.forget_counts()
    return await _dead_letters_page(request, name, f"purged {count}")


@router.get(f"{session.PREFIX}/events", response_class=HTMLResponse)
async def event_trail(
    request: Request, id: Annotated[str, Query(max_length=100)] = ""
) -> HTMLResponse:
    viewer = Viewer(request)
    if not id.strip():
        return page(request, "event.html", event_id="", trail=None, letters=None, problem=None)
    event_id = queries.event_uuid(id)
    if event_id is None:
        return page(
            request,
            "event.html",
            422,
            event_id=id,
            trail=None,
            letters=None,
            problem="id: an event id is a UUID, such as the event_id a recorded turn returns",
        )
    trail = await queries.trail(request.app.state.apool, viewer.app, event_id, viewer.admin)
    letters = None
    if viewer.admin:
        found = await sources(request)
        letters = await run_in_threadpool(_letters_of, found.queues, event_id)
    return page(
        request, "event.html", event_id=event_id, trail=trail, letters=letters, problem=None
    )


async def _dead_letters_page(
    request: Request, name: str, outcome: str | None, status: int = 200
) -> HTMLResponse:
    name = _known(name)
    found = await sources(request)
    listing = await run_in_threadpool(found.queues.show, name, SHOWN)
    return page(
        request,
        "dead_letters.html",
        status,
        names=NAMES,
        subscription=name,
        listing=listing,
        outcome=outcome,
    )


def _letters_of(queues: object, event_id: str) -> list[tuple[str, DeadLetter]]:
    """Each dead-letter subscription's letters of `event_id`."""
    held = []
    for name in NAMES:
        held.extend((name, letter) for letter in queues.peek(name) if letter.event_id == event_id)  # type: ignore[attr-defined]
    return held


def _known(name: str) -> str:
    if name not in NAMES:
        raise session.Refused(
            404, f"subscription: no subscription {name!r}; known: {', '.join(NAMES)}"
        )
    return name


def _event_ids(values: list[object]) -> list[str]:
    ids = [v.strip() for v in values if isinstance(v, str) and v.strip()]
    if not ids:
        raise session.Refused(422, "event_id: tick at least one dead letter")
    return list(dict.fromkeys(ids))
