"""A user's memory as the console shows it: find a user of the app, their profile
(services.console.profile_pages), their memories by scope (with kind, entity,
project and agent filters and a filter expression, and the hybrid search), each
memory's revisions and the event behind each, editing a memory, rolling it back to
a revision, its feedback and giving some, deleting it (after asking), the user's
sessions with their buffered turns and rolling summary, and the archive search.

The lists (users, a user's memories and sessions) are read from Postgres a page
at a time, with how many there are (shared.db.console_reads); everything else
goes through the API itself (services.console.pages.client), as the signed-in key.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console import access, inputs, queries
from services.console.pages import Viewer, client, page
from shared.client.models import MemoryDetail
from shared.db import console_reads as reads
from shared.db import feedback as feedback_reads
from shared.db.feedback import MAX_REASON, RATINGS
from shared.db.memory_rows import MemoryRow
from shared.memory.expiry import MAX_SECONDS, MIN_SECONDS

router = APIRouter(include_in_schema=False)
USERS = f"{access.PREFIX}/users"
USER = f"{access.PREFIX}/user"  # ids in the query: any user id is a path segment's trouble
MEMORY = f"{USER}/memory"
KINDS = ("preference", "fact", "rule", "event")
FOUND = 20  # search hits shown
EPISODES = 10  # archive hits shown


@router.get(USERS, response_class=HTMLResponse)
async def users(request: Request) -> HTMLResponse:
    query = request.query_params
    prefix = inputs.identifier(query, "q", required=False)  # the start of an id
    number = inputs.number(query, "page", default=1)
    found = await queries.read(
        request.app.state.apool,
        reads.users(Viewer(request).app, prefix, number, queries.PAGE_SIZE),
    )
    return page(request, "users.html", q=prefix, users=found)


@router.get(USER, response_class=HTMLResponse)
async def user(request: Request) -> HTMLResponse:
    query, viewer = request.query_params, Viewer(request)
    user_id = inputs.identifier(query, "id")
    filters = {
        "kind": inputs.choice(query, "kind", KINDS),
        "entity": inputs.text(query, "entity", limit=200),
        "project": inputs.identifier(query, "project", required=False),
        "agent": inputs.identifier(query, "agent", required=False),
        "q": inputs.text(query, "q"),
        "archive": inputs.text(query, "archive"),
        "filter": inputs.text(query, "filter", limit=None),
    }
    # The filter's JSON for the API's search, and its tree for the list read here.
    expression, matching = inputs.filter_expression(query, "filter") or (None, None)
    number = inputs.number(query, "page", default=1)
    sessions_number = inputs.number(query, "sessions", default=1)
    pool = request.app.state.apool
    if not await queries.read(pool, reads.user_known(viewer.app, user_id)):
        raise access.Refused(404, f"user_id: no user {user_id!r} in app {viewer.app!r}")
    # With an agent, its view: its memories and the user's, as it searches them.
    project, agent = filters["project"] or None, filters["agent"] or None
    found = episodes = None
    async with client(request) as api:
        schema, profile = await api.profile_schema(), await api.profile(user_id)
        profile_history = (await api.profile_revisions(user_id)).revisions
        if filters["q"]:
            kinds = [filters["kind"]] if filters["kind"] else None
            found = await api.search(
                user_id,
                filters["q"],
                project_id=project,
                agent_id=agent,
                k=FOUND,
                kinds=kinds,
                filter=expression,
            )
        if filters["archive"]:
            episodes = await api.archive_search(
                user_id,
                filters["archive"],
                project_id=project,
                agent_id=agent,
                k=EPISODES,
                context_turns=1,
            )
    where = reads.MemoryFilter(
        viewer.app,
        user_id,
        filters["kind"],
        filters["entity"],
        filters["project"],
        filters["agent"],
        matching,
    )
    memories = await queries.read(pool, reads.memories(where, number, queries.PAGE_SIZE))
    sessions = await queries.read(
        pool, reads.sessions(viewer.app, user_id, sessions_number, queries.PAGE_SIZE)
    )
    return page(
        request,
        "user.html",
        user_id=user_id,
        filters=filters,
        kinds=KINDS,
        memories=memories,
        scopes=_by_scope(memories.rows),
        found=found,
        episodes=episodes,
        sessions=sessions,
        profile_fields=schema.model_dump()["fields"],
        profile=profile,
        profile_history=profile_history,
        pages=_page_links(user_id, filters, number, sessions_number),
    )


@router.get(MEMORY, response_class=HTMLResponse)
async def memory(request: Request) -> HTMLResponse:
    user_id, memory_id, agent = await _memory_of(request, request.query_params)
    async with client(request) as api:
        detail = await api.get_memory(user_id, memory_id, agent_id=agent)
    return await _memory_page(request, user_id, detail, None)


@router.post(MEMORY + "/rollback", response_class=HTMLResponse)
async def rollback_memory(request: Request) -> HTMLResponse:
    form = await access.checked_form(request)
    user_id, memory_id, agent = await _memory_of(request, form)
    revision = inputs.number(form, "revision")
    async with client(request) as api:
        detail = await api.rollback_memory(user_id, memory_id, revision, agent_id=agent)
    newest = detail.revisions[-1].revision if detail.revisions else revision
    outcome = f"revision {revision}'s text is current again, as revision {newest}"
    return await _memory_page(request, user_id, detail, outcome)


@router.post(MEMORY + "/feedback", response_class=HTMLResponse)
async def memory_feedback(request: Request) -> HTMLResponse:
    form = await access.checked_form(request)
    # Feedback names no agent: the console's key is the app's, which reads every agent's.
    user_id, memory_id, _agent = await _memory_of(request, form)
    rating = inputs.choice(form, "rating", RATINGS)
    if not rating:
        raise access.Refused(422, "rating: is required")
    reason = inputs.text(form, "reason", limit=MAX_REASON)
    async with client(request) as api:
        given = await api.give_feedback(user_id, memory_id, rating, reason=reason or None)
    outcome = f"recorded as {rating.replace('_', ' ')}"
    if given.memory.deleted_at:
        outcome += ": the memory is retired (roll it back to bring it back)"
    return await _memory_page(request, user_id, given.memory, outcome)


async def _memory_page(
    request: Request, user_id: str, detail: MemoryDetail, outcome: str | None
) -> HTMLResponse:
    """The memory's page: the entities it mentions and the facts it states (as the
    API's detail has them, each entity a link to its page), and its feedback."""
    app, pool = Viewer(request).app, request.app.state.apool
    given = await queries.read(pool, feedback_reads.of_memory(app, user_id, detail.id))
    # A memory that wrong feedback retired can be rolled back to life.
    restorable = any(f.rating == "wrong" and f.restored_at is None for f in given)
    return page(
        request,
        "memory.html",
        user_id=user_id,
        memory=detail,
        outcome=outcome,
        projects={e.id: e.project_id for e in detail.entities},
        feedback=given,
        ratings=RATINGS,
        restorable=bool(detail.deleted_at) and restorable,
        ttl_bounds=(MIN_SECONDS, MAX_SECONDS),
    )


@router.post(MEMORY + "/edit", response_class=HTMLResponse)
async def edit_memory(request: Request) -> HTMLResponse:
    form = await access.checked_form(request)
    user_id, memory_id, agent = await _memory_of(request, form)
    text = inputs.text(form, "text", required=True)
    kind = inputs.choice(form, "kind", KINDS)
    entity = inputs.text(form, "entity_name", limit=200).strip()
    topic = inputs.text(form, "topic").strip()  # the API checks its pattern
    metadata = inputs.metadata(form, "metadata")
    expire_at, ttl_seconds, never = _expiry(form)
    async with client(request) as api:
        before = len((await api.get_memory(user_id, memory_id, agent_id=agent)).revisions)
        detail = await api.edit_memory(
            user_id,
            memory_id,
            text=text,
            kind=kind or None,
            entity_name=entity,
            topic=topic,
            metadata=metadata,
            expire_at=expire_at,
            ttl_seconds=ttl_seconds,
            never_expire=never,
            agent_id=agent,
        )
    added = len(detail.revisions) - before
    outcome = f"saved as revision {len(detail.revisions)}" if added else "nothing changed"
    return await _memory_page(request, user_id, detail, outcome)


def _expiry(form: inputs.Source) -> tuple[datetime | None, int | None, bool]:
    """The edit's expiry: a time, seconds from now, or never; none of them keeps the
    memory's as it is, and two of them are refused."""
    expire_at = inputs.time(form, "expire_at")
    ttl = inputs.number(form, "ttl_seconds", default=0, least=MIN_SECONDS, most=MAX_SECONDS)
    never = inputs.choice(form, "never_expire", ("yes",)) == "yes"
    fields = {"expire_at": expire_at, "ttl_seconds": ttl, "never_expire": never}
    given = [name for name, value in fields.items() if value]
    if len(given) > 1:
        raise access.Refused(422, f"{given[-1]}: give one of {', '.join(fields)}, not two")
    return expire_at, ttl or None, never


@router.post(MEMORY + "/delete")
async def delete_memory(request: Request) -> Response:
    form = await access.checked_form(request)
    user_id, memory_id, agent = await _memory_of(request, form)
    if form.get("confirm") != "yes":
        # Asked first, on a page of its own: it works without scripts.
        async with client(request) as api:
            detail = await api.get_memory(user_id, memory_id, agent_id=agent)
        return page(request, "memory_delete.html", user_id=user_id, memory=detail)
    async with client(request) as api:
        await api.delete_memory(user_id, memory_id, agent_id=agent)
    # Back to the memory: it now shows as deleted, with its DELETED revision.
    return RedirectResponse(memory_url(user_id, memory_id, agent), status_code=303)


@router.get(USER + "/session", response_class=HTMLResponse)
async def session_page(request: Request) -> HTMLResponse:
    query = request.query_params
    user_id, session_id = inputs.identifier(query, "user"), inputs.identifier(query, "id")
    # An agent's session is read as that agent: the link's, or its archived turns'.
    agent = inputs.identifier(query, "agent", required=False)
    if not agent:
        owner = reads.agent_of_session(Viewer(request).app, user_id, session_id)
        agent = await queries.read(request.app.state.apool, owner)
    async with client(request) as api:
        view = await api.session(session_id, user_id, agent_id=agent or None)
    return page(request, "session.html", user_id=user_id, view=view)


def memory_url(user_id: str, memory_id: str, agent: str | None = None) -> str:
    query = {"user": user_id, "id": memory_id, **({"agent": agent} if agent else {})}
    return f"{MEMORY}?{urlencode(query)}"


async def _memory_of(request: Request, source: inputs.Source) -> tuple[str, str, str | None]:
    """The user, the memory and its agent (None: the user's memory): an agent's memory
    is read, changed and deleted as that agent. The agent is the request's, or read
    from the memory (links that do not name it: an entity's memories)."""
    user_id, memory_id = inputs.identifier(source, "user"), inputs.identifier(source, "id")
    if queries.event_uuid(memory_id) is None:
        raise access.Refused(422, "id: a memory id is a UUID")
    agent = inputs.identifier(source, "agent", required=False)
    if not agent:
        owner = reads.agent_of_memory(Viewer(request).app, user_id, memory_id)
        agent = await queries.read(request.app.state.apool, owner)
    return user_id, memory_id, agent or None


def _page_links(
    user_id: str, filters: dict[str, str], number: int, sessions_number: int
) -> dict[str, str]:
    """The URL of this user page with another page of memories or of sessions."""
    kept = {"id": user_id, **{k: v for k, v in filters.items() if v}}

    def url(memories: int, sessions: int) -> str:
        pages = {"page": str(memories), "sessions": str(sessions)}
        return f"{USER}?{urlencode({**kept, **{k: v for k, v in pages.items() if v != '1'}})}"

    return {
        "memories_previous": url(number - 1, sessions_number),
        "memories_next": url(number + 1, sessions_number),
        "sessions_previous": url(number, sessions_number - 1),
        "sessions_next": url(number, sessions_number + 1),
    }


def _by_scope(memories: list[MemoryRow]) -> list[tuple[str, list[MemoryRow]]]:
    """Global first, then each project, then each session, each named (the rows
    come in that order)."""
    groups: dict[str, list[MemoryRow]] = defaultdict(list)
    for memory in memories:
        if memory.scope == "project":
            groups[f"project {memory.project_id}"].append(memory)
        elif memory.scope == "session":
            groups[f"session {memory.session_id}"].append(memory)
        else:
            groups["global"].append(memory)
    return list(groups.items())
