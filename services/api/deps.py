"""The routes' typed dependencies: what the lifespan opened, and who is asking.

A route names what it uses as a parameter (`buffer: BufferDep`, `app_id: AppIdDep`);
no route reads `app.state` itself. `attach` puts the parts on `app.state` when the
app starts (the middleware reads `resources` and `apool` there too), and `_state`
is the one place that reads them back.

Every dependency is an `async def`: FastAPI runs a plain `def` dependency in its
thread pool, a hop per request for a plain attribute read. Each one still costs
a little per request, so a hot route asks only for what it uses.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import valkey.asyncio
from fastapi import Depends, FastAPI, Request
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from starlette.datastructures import State

from services.api.tenant import app_of, is_admin
from shared.bootstrap import Resources
from shared.bus.publisher import EventPublisher
from shared.config import Settings
from shared.embeddings.base import Embedder
from shared.llm.base import LLM
from shared.memory.retrieval import MemorySearch
from shared.memory.search import Fusion
from shared.permissions import Guardrail
from shared.session_buffer import AsyncSessionBuffer

T = TypeVar("T")


def attach(
    app: FastAPI,
    resources: Resources,
    buffer: AsyncSessionBuffer,
    apool: AsyncConnectionPool,
    guardrail: Guardrail,
) -> None:
    """Put the parts the lifespan opened where the dependencies find them. The
    parts `Resources` may leave out are checked here, once, not per request."""
    state = app.state
    state.resources = resources
    state.buffer = buffer
    state.apool = apool
    state.permissions = guardrail
    state.pool = _built(resources.pool, "the Postgres pool")
    state.publisher = _built(resources.publisher, "the publisher")
    state.llm = _built(resources.llm, "the LLM")
    state.embedder = _built(resources.embedder, "the embedder")


def _built(part: T | None, name: str) -> T:
    if part is None:
        raise RuntimeError(f"the API needs {name}; bootstrap built none")
    return part


def _state(request: Request) -> State:
    return request.app.state


async def get_resources(request: Request) -> Resources:
    return _state(request).resources


async def get_settings(request: Request) -> Settings:
    return _state(request).resources.settings


async def get_buffer(request: Request) -> AsyncSessionBuffer:
    return _state(request).buffer


async def get_valkey(request: Request) -> valkey.asyncio.Valkey:
    """The session buffer's asyncio client: grants, tombstones, key scans."""
    return _state(request).buffer.client


async def get_async_pool(request: Request) -> AsyncConnectionPool:
    """Postgres on the event loop: the reads."""
    return _state(request).apool


async def get_pool(request: Request) -> ConnectionPool:
    """Postgres for blocking code on a worker thread: the writes that lock a user."""
    return _state(request).pool


async def get_guardrail(request: Request) -> Guardrail:
    return _state(request).permissions


async def get_publisher(request: Request) -> EventPublisher:
    return _state(request).publisher


async def get_embedder(request: Request) -> Embedder:
    return _state(request).embedder


async def get_llm(request: Request) -> LLM:
    return _state(request).llm


async def get_memory_search(request: Request) -> MemorySearch:
    """The hybrid search over memories and episodes, on the event loop's pool."""
    state = _state(request)
    return MemorySearch(state.apool, state.embedder, Fusion.from_settings(state.resources.settings))


async def get_app_id(request: Request) -> str:
    """The request's tenant, from its API key (services.api.auth)."""
    return app_of(request)


async def get_is_admin(request: Request) -> bool:
    """Whether the request's key is an admin key of its app."""
    return is_admin(request)


ResourcesDep = Annotated[Resources, Depends(get_resources)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
BufferDep = Annotated[AsyncSessionBuffer, Depends(get_buffer)]
ValkeyDep = Annotated[valkey.asyncio.Valkey, Depends(get_valkey)]
AsyncPoolDep = Annotated[AsyncConnectionPool, Depends(get_async_pool)]
PoolDep = Annotated[ConnectionPool, Depends(get_pool)]
GuardrailDep = Annotated[Guardrail, Depends(get_guardrail)]
PublisherDep = Annotated[EventPublisher, Depends(get_publisher)]
EmbedderDep = Annotated[Embedder, Depends(get_embedder)]
LlmDep = Annotated[LLM, Depends(get_llm)]
MemorySearchDep = Annotated[MemorySearch, Depends(get_memory_search)]
AppIdDep = Annotated[str, Depends(get_app_id)]
AdminDep = Annotated[bool, Depends(get_is_admin)]

__all__ = [
    "AdminDep",
    "AppIdDep",
    "AsyncPoolDep",
    "BufferDep",
    "EmbedderDep",
    "GuardrailDep",
    "LlmDep",
    "MemorySearchDep",
    "PoolDep",
    "PublisherDep",
    "ResourcesDep",
    "SettingsDep",
    "ValkeyDep",
    "attach",
]
