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

from collections.abc import Sequence

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from starlette.datastructures import FormData

from services.console import access, inputs, queries
from services.console.pages import Viewer, page, require_admin
from services.console.sources import sources
from shared.bus.dlq import COUNT_CAP, DeadLetter, DeadLetterQueues, MissingEvents
from shared.bus.replay import ReplayFilter, replay
from shared.bus.topology import SUBSCRIPTIONS
from shared.db import console_reads as reads
from shared.identifiers import identifier_problem

router = APIRouter(include_in_schema=False)
DEAD = f"{access.PREFIX}/dead-letters"
NAMES = tuple(spec.name for spec in SUBSCRIPTIONS)
MAX_TICKED = 1000  # event ids of one replay or purge


@router.get(DEAD, response_class=HTMLResponse)
async def dead_letters(request: Request) -> HTMLResponse:
    require_admin(Viewer(request))
    query = request.query_params
    name = inputs.choice(query, "subscription", NAMES, default=NAMES[0])
    number = inputs.number(query, "page", default=1)
    return await _dead_letters_page(request, name, None, number=number)


@router.post(DEAD + "/{subscription}/replay", response_class=HTMLResponse)
async def replay_letters(request: Request, subscription: str) -> HTMLResponse:
    _form, name, ids = await _ticked(request, subscription)
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
    form, name, ids = await _ticked(request, subscription)
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


@router.get(f"{access.PREFIX}/events", response_class=HTMLResponse)
async def event_trail(request: Request) -> HTMLResponse:
    viewer = Viewer(request)
    id = inputs.text(request.query_params, "id", limit=100).strip()
    if not id:
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
    trail = await queries.read(
        request.app.state.apool, reads.trail(viewer.app, event_id, viewer.admin)
    )
    letters = None
    if viewer.admin:
        found = await sources(request)
        letters = await run_in_threadpool(_letters_of, found.queues, event_id)
    return page(
        request, "event.html", event_id=event_id, trail=trail, letters=letters, problem=None
    )


async def _dead_letters_page(
    request: Request, name: str, outcome: str | None, status: int = 200, number: int = 1
) -> HTMLResponse:
    name = _known(name)
    found = await sources(request)
    size = queries.PAGE_SIZE
    # The oldest first: a page is the slice of the oldest `number × size` read.
    listing = await run_in_threadpool(found.queues.show, name, number * size)
    letters = reads.Page(listing.letters[(number - 1) * size :], listing.total, number, size)
    return page(
        request,
        "dead_letters.html",
        status,
        names=NAMES,
        subscription=name,
        letters=letters,
        capped=listing.total >= COUNT_CAP,
        outcome=outcome,
    )


def _letters_of(queues: DeadLetterQueues, event_id: str) -> list[tuple[str, DeadLetter]]:
    """Each dead-letter subscription's letters of `event_id`."""
    held: list[tuple[str, DeadLetter]] = []
    for name in NAMES:
        held.extend((name, letter) for letter in queues.peek(name) if letter.event_id == event_id)
    return held


async def _ticked(request: Request, subscription: str) -> tuple[FormData, str, list[str]]:
    """An admin's form on dead letters: the form, the subscription it names (a known
    one) and the event ids of the letters it ticked."""
    form = await access.checked_form(request)
    require_admin(Viewer(request))
    return form, _known(subscription), _event_ids(form.getlist("event_id"))


def _known(name: str) -> str:
    if name not in NAMES:
        raise access.Refused(
            404, f"subscription: no subscription {name[:100]!r}; known: {', '.join(NAMES)}"
        )
    return name


def _event_ids(values: Sequence[object]) -> list[str]:
    ids = [v.strip() for v in values if isinstance(v, str) and v.strip()]
    if not ids:
        raise access.Refused(422, "event_id: tick at least one dead letter")
    if len(ids) > MAX_TICKED:
        raise access.Refused(422, f"event_id: at most {MAX_TICKED} at once")
    for event_id in ids:
        problem = identifier_problem(event_id)
        if problem is not None:
            raise access.Refused(422, f"event_id: {problem}")
    return list(dict.fromkeys(ids))
