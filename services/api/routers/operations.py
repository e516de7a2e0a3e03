"""Long-running requests: `memories:generate` publishes a request for the
extraction worker and answers with an operation, which the client polls by name
(or waits for, with `wait`) until the worker, or the dead-letter path, ends it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from psycopg_pool import ConnectionPool

from services.api.agents import KeyAgentDep, acting
from services.api.deps import ApiDep, AppIdDep
from services.api.errors import ApiError, encode_or_4xx, postgres_or_503, published_or_503
from services.api.memory_models import GenerateRequest, Identifier, Operation
from services.api.models import READ_AS
from shared.db.unit_of_work import UnitOfWork, in_thread
from shared.events import MemoriesGenerate, utcnow
from shared.events.models import ContentEvent
from shared.memory.agents import visible_to

router = APIRouter()

# What an operation says when Pub/Sub never confirmed its request.
UNPUBLISHED = "Pub/Sub did not confirm the request; send it again"


@router.post("/v1/memories:generate", response_model=Operation, status_code=202)
async def generate(
    body: GenerateRequest,
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
) -> Operation:
    settings, pool = api.settings, api.pool
    name = f"operations/generate-{uuid.uuid4()}"
    event = _generate_event(app_id, name, body, key_agent)
    message = encode_or_4xx(event, api.publisher.limits)
    agent = event.agent_id
    await _commit(
        pool, lambda uow: uow.operations.start(name, app_id, body.user_id, "generate", agent)
    )
    try:
        await published_or_503(
            lambda: api.publisher.publish_message(message),
            settings.publish_timeout_seconds,
            details={"operation": name},
        )
    except ApiError:
        # No worker will ever see it: the operation ends here, never pending.
        await _commit(pool, lambda uow: uow.operations.fail(name, UNPUBLISHED))
        raise
    if body.wait:
        wait = settings.operation_wait_seconds
        return await _wait(pool, app_id, name, body.user_id, visible_to(agent), wait)
    return Operation(name=name, done=False)


@router.get("/v1/operations/{name:path}", response_model=Operation)
async def get_operation(
    name: Annotated[Identifier, Path()],
    app_id: AppIdDep,
    api: ApiDep,
    key_agent: KeyAgentDep,
    user_id: Annotated[Identifier, Query()],
    agent_id: Annotated[Identifier | None, Query(description=READ_AS)] = None,
) -> Operation:
    """An operation the read may see: one its agent started, or no agent (its result
    names that agent's memories, as a read of them would)."""
    agents = visible_to(acting(key_agent, agent_id))
    operation = await _operation(api.pool, app_id, name, user_id, agents)
    if operation is None:
        raise ApiError(404, "not_found", f"no operation {name} for this user")
    return operation


def _generate_event(
    app_id: str, name: str, body: GenerateRequest, key_agent: str
) -> MemoriesGenerate:
    return MemoriesGenerate(
        event_id=str(uuid.uuid4()),
        app=app_id,
        user_id=body.user_id,
        operation=name,
        created_at=utcnow(),
        events=tuple(ContentEvent(e.role, e.text) for e in body.events),
        project_id=body.scope.project_id or "",
        session_id=body.scope.session_id or "",
        agent_id=acting(key_agent, body.scope.agent_id, "scope.agent_id"),
    )


async def _commit(pool: ConnectionPool, work: Callable[[UnitOfWork], Any]) -> None:
    await postgres_or_503(in_thread(pool, work, commit=True))


async def _operation(
    pool: ConnectionPool, app_id: str, name: str, user_id: str, agents: Sequence[str]
) -> Operation | None:
    if not name.startswith("operations/"):
        name = f"operations/{name}"
    row = await postgres_or_503(
        in_thread(pool, lambda uow: uow.operations.get(name, app_id, user_id, agents), commit=False)
    )
    if row is None:
        return None
    generated = (row.result or {}).get("generated_memories") if row.done else None
    return Operation(name=row.name, done=row.done, generated_memories=generated, error=row.error)


async def _wait(
    pool: ConnectionPool,
    app_id: str,
    name: str,
    user_id: str,
    agents: Sequence[str],
    seconds: float,
) -> Operation:
    """Poll the operation until done or `seconds` pass."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    delay = 0.02
    while True:
        operation = await _operation(pool, app_id, name, user_id, agents)
        if operation is None:  # the user was deleted while we waited
            raise ApiError(404, "not_found", f"no operation {name} for this user")
        if operation.done or loop.time() >= deadline:
            return operation
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(delay * 2, 0.5)
