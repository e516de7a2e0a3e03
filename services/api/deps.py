"""The routes' dependencies: the process's parts, and who is asking.

A route takes the parts the lifespan opened as one parameter, `api: ApiDep`, and
reads what it uses from it (`api.buffer`, `api.settings`); no route reads
`app.state` itself. Each dependency is a pass of FastAPI's solver on every
request, and the parts are fixed for the life of the process, so one object
built at start-up carries them all. The request's own facts (`AppIdDep`,
`AdminDep`) stay dependencies of their own.

`attach` builds that object when the app starts and puts it on `app.state`, next
to the parts the middleware reads there (`resources`, `apool`). Every dependency
is an `async def`: FastAPI runs a plain `def` dependency in its thread pool, a
hop per request for a plain attribute read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypeVar

import valkey.asyncio
from fastapi import Depends, FastAPI, Request, params
from fastapi.dependencies.utils import get_flat_params
from fastapi.routing import APIRoute
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from services.api.agents import refuse_outside_agent_routes
from services.api.errors import ApiError
from services.api.tenant import app_of, caller_of, is_admin
from shared.bootstrap import Resources
from shared.bus.publisher import EventPublisher
from shared.config import Settings
from shared.embeddings.base import Embedder
from shared.llm.accounting import set_app
from shared.llm.base import LLM
from shared.memory.ranking import Fusion
from shared.memory.search import MemorySearch
from shared.permissions import Guardrail
from shared.session_buffer import AsyncSessionBuffer

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Api:
    """What the routes use, opened once for the process by the app's lifespan."""

    settings: Settings
    buffer: AsyncSessionBuffer
    valkey: valkey.asyncio.Valkey  # the buffer's client: grants, tombstones, key scans
    apool: AsyncConnectionPool  # Postgres on the event loop: the reads
    pool: ConnectionPool  # Postgres for blocking code on a worker thread: locked writes
    guardrail: Guardrail
    publisher: EventPublisher
    embedder: Embedder
    llm: LLM
    search: MemorySearch  # the hybrid search over memories and episodes, on `apool`


def attach(
    app: FastAPI,
    resources: Resources,
    buffer: AsyncSessionBuffer,
    apool: AsyncConnectionPool,
    guardrail: Guardrail,
) -> Api:
    """Build the routes' `Api` from the parts the lifespan opened and put it on
    `app.state`. The parts `Resources` may leave out are checked here, once, not
    per request."""
    settings = resources.settings
    embedder = _built(resources.embedder, "the embedder")
    api = Api(
        settings=settings,
        buffer=buffer,
        valkey=buffer.client,
        apool=apool,
        pool=_built(resources.pool, "the Postgres pool"),
        guardrail=guardrail,
        publisher=_built(resources.publisher, "the publisher"),
        embedder=embedder,
        llm=_built(resources.llm, "the LLM"),
        search=MemorySearch(apool, embedder, Fusion.from_settings(settings)),
    )
    state = app.state
    state.api = api
    # The middleware reads these (services.api.auth, services.api.guard).
    state.resources = resources
    state.apool = apool
    state.buffer = buffer
    state.permissions = guardrail
    return api


def _built(part: T | None, name: str) -> T:
    if part is None:
        raise RuntimeError(f"the API needs {name}; bootstrap built none")
    return part


async def get_api(request: Request) -> Api:
    return request.app.state.api


async def get_app_id(request: Request) -> str:
    """The request's tenant, from its API key (services.api.auth); also the app of
    the model calls the request makes (their metrics). Set in the request's own
    task, which the route runs in, and gone with it. Every `/v1` route takes it,
    so it also refuses a query parameter the route does not declare, and a key
    limited to an agent on a route that serves no agent (services.api.agents)."""
    unknown = sorted(set(request.query_params) - _declared(request.scope["route"]))
    if unknown:
        name = unknown[0]
        raise ApiError(
            422, "invalid_request", f"{name}: is not a known query parameter", field=name
        )
    refuse_outside_agent_routes(request)
    app = app_of(request)
    set_app(app)
    return app


def _declared(route: APIRoute) -> frozenset[str]:
    """The query parameters a route takes, by the names a client sends (kept on the
    route: its dependencies never change)."""
    declared = getattr(route, "_declared_query", None)
    if declared is None:
        fields = get_flat_params(route.dependant)
        declared = frozenset(f.alias for f in fields if isinstance(f.field_info, params.Query))
        route._declared_query = declared  # type: ignore[attr-defined]  # our own cache
    return declared


async def get_is_admin(request: Request) -> bool:
    """Whether the request's key is an admin key of its app."""
    return is_admin(request)


async def get_caller(request: Request) -> str:
    """Who is asking, as a revision's source names it (services.api.tenant)."""
    return caller_of(request)


ApiDep = Annotated[Api, Depends(get_api)]
AppIdDep = Annotated[str, Depends(get_app_id)]
AdminDep = Annotated[bool, Depends(get_is_admin)]
CallerDep = Annotated[str, Depends(get_caller)]

__all__ = ["AdminDep", "Api", "ApiDep", "AppIdDep", "CallerDep", "attach"]
