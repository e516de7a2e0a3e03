"""One user's memory as JSON Lines (shared.portability): the export, for a
right-of-access request, and the import, into the path's user of the key's app.

The export streams from a server-side cursor on the asyncio pool: the API holds
one batch of rows at a time, however large the user, and one pooled connection
for as long as the client takes to read. The import reads the body (at most
AM_MAX_REQUEST_BYTES), then checks and writes it record by record on a worker
thread (the blocking repositories, like the other locked writes); the good
lines of a body with bad lines are imported, and the answer is a 422 naming the
first bad lines, so that the client sees both.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Annotated

import structlog
from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from services.api.custom_methods import ResourceRoute
from services.api.deps import Api, ApiDep, AppIdDep
from services.api.errors import ApiError, error_body, postgres_or_503, request_id_of
from services.api.models import Identifier
from shared.db.user_export import aexport_lines, ahas_rows
from shared.events import utcnow
from shared.portability.importing import ImportReport, UserDeleted, import_lines, numbered_lines
from shared.portability.records import MEDIA_TYPE, BadLine

log = structlog.get_logger("agent_memory.api")
router = APIRouter(route_class=ResourceRoute)

PathId = Annotated[Identifier, Path()]
# A 422 names this many bad lines; its message counts them all.
FIRST_BAD_LINES = 20
_LINES = {"schema": {"type": "string", "description": "JSON Lines (docs/api.md, User export)"}}


class ImportResponse(BaseModel):
    user_id: str
    memories: int = Field(description="memories imported (with their revisions)")
    episodes: int = Field(description="episodes imported")
    profiles: int = Field(default=0, description="profile fields imported (with their history)")
    entities: int = Field(description="entities imported (with their aliases and mentions)")
    facts: int = Field(description="facts between entities imported")
    merges: int = Field(description="merges of entities imported (undone ones too)")
    skipped: int = Field(description="records that were there already")
    bad_lines: int = Field(description="always 0 here: a body with bad lines answers 422")
    complete: bool = Field(description="the body ended with the export's end line")


@router.get(
    "/v1/users/{user_id}:export",
    response_class=StreamingResponse,
    responses={
        200: {"description": "The user's export, as JSON Lines.", "content": {MEDIA_TYPE: _LINES}}
    },
)
async def export_user(user_id: PathId, app_id: AppIdDep, api: ApiDep) -> Response:
    """Every memory of the user (live and deleted, with its revisions), every
    archived turn and the user's profile (each field with its history), as JSON
    Lines; `404` if the app has nothing of the user."""

    async def found() -> bool:
        async with api.apool.connection() as conn:
            return await ahas_rows(conn, app_id, user_id)

    if not await postgres_or_503(found()):
        raise ApiError(404, "not_found", f"this app has nothing of user {user_id!r}", "user_id")
    return StreamingResponse(_export(api, app_id, user_id), media_type=MEDIA_TYPE)


async def _export(api: Api, app_id: str, user_id: str) -> AsyncIterator[bytes]:
    try:
        async with api.apool.connection() as conn:
            now = utcnow()
            async for chunk in aexport_lines(
                conn, app_id, user_id, api.settings.embedding_dim, now
            ):
                yield chunk
    except Exception as exc:
        # The status is out: the connection is cut, so the client sees a failed
        # transfer (and a body without its end line), never a short export that looks whole.
        log.warning("export failed", user_id=user_id, error=repr(exc))
        raise


@router.post(
    "/v1/users/{user_id}:import",
    response_model=ImportResponse,
    openapi_extra={"requestBody": {"required": True, "content": {MEDIA_TYPE: _LINES}}},
)
async def import_user(
    user_id: PathId, request: Request, app_id: AppIdDep, api: ApiDep
) -> ImportResponse | JSONResponse:
    """Import an export (its header first) into the path's user; idempotent. `409`
    if the user was deleted (nothing imported); `422` naming the bad lines, the
    good ones imported."""
    body = await request.body()
    bad: list[BadLine] = []

    def keep(line: BadLine) -> None:
        if len(bad) < FIRST_BAD_LINES:
            bad.append(line)

    def run() -> ImportReport:
        with api.pool.connection() as conn:
            lines = numbered_lines(io.BytesIO(body))
            dim = api.settings.embedding_dim
            return import_lines(conn, lines, dim, keep, app=app_id, user_id=user_id)

    try:
        report = await postgres_or_503(asyncio.to_thread(run))
    except UserDeleted as exc:
        raise ApiError(409, "user_deleted", str(exc), "user_id") from None
    log.info("user imported", user_id=user_id, result=report.summary())
    if report.bad_lines:
        listed = "; ".join(str(line) for line in bad)
        more = report.bad_lines - len(bad)
        message = f"{report.summary()}: {listed}" + (f"; and {more} more" if more else "")
        fields = [{"field": f"line {line.number}", "message": line.reason} for line in bad]
        content = error_body("invalid_request", message, fields, None, request_id_of(request.scope))
        return JSONResponse(status_code=422, content=content)
    return ImportResponse(
        user_id=user_id,
        memories=report.memories,
        episodes=report.episodes,
        profiles=report.profiles,
        entities=report.entities,
        facts=report.facts,
        merges=report.merges,
        skipped=report.skipped,
        bad_lines=0,
        complete=report.complete,
    )
