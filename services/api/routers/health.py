"""Liveness and readiness: open to every caller, outside `/v1`. Ready means each
dependency (Postgres, Valkey, Pub/Sub) answered just now."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import structlog
import valkey.asyncio
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool

from services.api.deps import ApiDep
from shared.bus.publisher import EventPublisher
from shared.db.pool import ping

CHECK_TIMEOUT_SECONDS = 2.0
log = structlog.get_logger("agent_memory.api")


async def _check(name: str, call: Awaitable[Any]) -> bool:
    try:
        await asyncio.wait_for(call, CHECK_TIMEOUT_SECONDS)
    except Exception as exc:  # any failure means "not ready"
        # The reason (hosts, ports, driver messages) goes to the log, not to callers.
        reason = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        log.warning("dependency not ready", dependency=name, reason=reason[:500])
        return False
    return True


async def readiness(
    pool: ConnectionPool, publisher: EventPublisher, valkey_client: valkey.asyncio.Valkey
) -> dict[str, bool]:
    """Check Postgres, Valkey and Pub/Sub concurrently: name -> reachable."""

    def postgres() -> None:
        with pool.connection(timeout=CHECK_TIMEOUT_SECONDS) as conn:
            ping(conn)

    def pubsub() -> None:
        publisher.client.get_topic(
            request={"topic": publisher.topic_path("turns")}, timeout=CHECK_TIMEOUT_SECONDS
        )

    checks = {
        "postgres": asyncio.to_thread(postgres),
        "valkey": valkey_client.ping(),
        "pubsub": asyncio.to_thread(pubsub),
    }
    results = await asyncio.gather(*(_check(name, call) for name, call in checks.items()))
    return dict(zip(checks, results, strict=True))


router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(api: ApiDep) -> JSONResponse:
    # 503 names each dependency that did not answer; the reasons go to the log only.
    checks = await readiness(api.pool, api.publisher, api.valkey)
    down = sorted(name for name, ok in checks.items() if not ok)
    body = {"status": "unavailable" if down else "ready", "down": down}
    return JSONResponse(status_code=503 if down else 200, content=body)
