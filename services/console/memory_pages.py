"""A user's memory as the console shows it: find a user of the app, their memories
by scope (with kind and entity filters, and the hybrid search), each memory's
revisions and the event behind each, deleting a memory, the user's sessions with
their buffered turns and rolling summary, and the archive search.

Everything but the lists of users and sessions goes through the API itself
(services.console.app.client), as the signed-in key.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console import queries, session
from services.console.app import Viewer, client, page
from shared.client import models as m

router = APIRouter(include_in_schema=False)
USERS = f"{session.PREFIX}/users"
USER = f"{session.PREFIX}/user"  # ids in the query: any user id is a path segment's trouble
LISTED = 500  # memories listed on a user's page; the search finds the rest
KINDS = ("preference", "fact", "rule", "event")
Text = Annotated[str, Query(max_length=500)]


@router.get(USERS, response_class=HTMLResponse)
async def users(request: Request, q: Text = "") -> HTMLResponse:
    viewer = Viewer(request)
    found = await queries.find_users(request.app.state.apool, viewer.app, _plain("q", q.strip()))
    return page(request, "users.html", q=q, users=found)


@router.get(USER, response_class=HTMLResponse)
async def user(
    request: Request,
    id: Text,
    kind: Text = "",
    entity: Text = "",
    project: Text = "",
    q: Text = "",
    archive: Text = "",
) -> HTMLResponse:
    viewer = Viewer(request)
    user_id = _plain("id", id)
    project = _plain("project", project)
    if not await queries.user_known(request.app.state.apool, viewer.app, user_id):
        raise session.Refused(404, f"user_id: no user {user_id!r} in app {viewer.app!r}")
    kind = kind if kind in KINDS else ""
    found: list[m.ScoredMemory] | None = None
    episodes: list[m.EpisodeView] | None = None
    async with client(request) as api:
        if q.strip():
            found = await api.search(
                user_id, q, project_id=project or None, k=20, kinds=[kind] if kind else None
            )
        page_ = await api.list_memories(
            user_id, project_id=project or None, kind=kind or None, limit=LISTED
        )
        if archive.strip():
            episodes = await api.archive_search(
                user_id, archive, project_id=project or None, k=10, context_turns=1
            )
    listed = [memory for memory in page_.memories if entity.lower() in memory.entity_name.lower()]
    sessions = await queries.user_sessions(request.app.state.apool, viewer.app, user_id)
    return page(
        request,
        "user.html",
        user_id=user_id,
        filters={"kind": kind, "entity": entity, "project": project, "q": q, "archive": archive},
        kinds=KINDS,
        scopes=_by_scope(listed),
        more=page_.next_cursor is not None,
        found=found,
        episodes=episodes,
        sessions=sessions,
    )


@router.get(USER + "/memory", response_class=HTMLResponse)
async def memory(request: Request, user: Text, id: Text) -> HTMLResponse:
    async with client(request) as api:
        detail = await api.get_memory(user, id)
    return page(request, "memory.html", user_id=user, memory=detail)


@router.post(USER + "/memory/delete")
async def delete_memory(request: Request) -> Response:
    form = await session.checked_form(request)
    user, memory_id = str(form.get("user") or ""), str(form.get("id") or "")
    async with client(request) as api:
        await api.delete_memory(user, memory_id)
    # Back to the memory: it now shows as deleted, with its DELETED revision.
    query = urlencode({"user": user, "id": memory_id})
    return RedirectResponse(f"{USER}/memory?{query}", status_code=303)


@router.get(USER + "/session", response_class=HTMLResponse)
async def session_page(request: Request, user: Text, id: Text) -> HTMLResponse:
    async with client(request) as api:
        view = await api.session(id, user)
    return page(request, "session.html", user_id=user, view=view)


def _plain(field: str, text: str) -> str:
    """`text` for a query of the console's own: Postgres takes no NUL, and no id
    of ours holds a control character."""
    if any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise session.Refused(422, f"{field}: must not contain control characters")
    return text


def _by_scope(memories: list[m.MemoryView]) -> list[tuple[str, list[m.MemoryView]]]:
    """Global first, then each project, then each session, each named."""
    groups: dict[str, list[m.MemoryView]] = defaultdict(list)
    for memory in memories:
        if memory.scope == "project":
            groups[f"project {memory.project_id}"].append(memory)
        elif memory.scope == "session":
            groups[f"session {memory.session_id}"].append(memory)
        else:
            groups["global"].append(memory)
    order = {"global": 0, "project": 1, "session": 2}
    return sorted(groups.items(), key=lambda item: (order[item[0].split(" ")[0]], item[0]))
