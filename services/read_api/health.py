"""Readiness: is each dependency reachable right now?"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from shared.bootstrap import Resources

CHECK_TIMEOUT_SECONDS = 2.0


async def _timed(fn: Callable[[], Any]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        await asyncio.wait_for(asyncio.to_thread(fn), CHECK_TIMEOUT_SECONDS)
    except Exception as exc:  # any failure means "not ready"; the reason is reported
        reason = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        return {"ok": False, "error": reason[:300]}
    return {"ok": True, "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


async def readiness(resources: Resources) -> dict[str, dict[str, Any]]:
    """Check Postgres, Valkey and Pub/Sub concurrently."""

    def postgres() -> None:
        assert resources.pool is not None
        with resources.pool.connection(timeout=CHECK_TIMEOUT_SECONDS) as conn:
            conn.execute("SELECT 1")

    def valkey() -> None:
        assert resources.valkey is not None
        resources.valkey.ping()

    def pubsub() -> None:
        assert resources.publisher is not None
        publisher = resources.publisher
        publisher.client.get_topic(
            request={"topic": publisher.topic_path("turns")}, timeout=CHECK_TIMEOUT_SECONDS
        )

    names = ("postgres", "valkey", "pubsub")
    results = await asyncio.gather(_timed(postgres), _timed(valkey), _timed(pubsub))
    return dict(zip(names, results, strict=True))
