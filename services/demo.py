"""`agent-memory demo` (what `make demo` runs): a fresh local stack, a few turns
recorded through the HTTP API, and each one followed through the pipeline —
the summary worker's Valkey buffer and the extraction worker's episode archive.

It waits by polling with a deadline, never by fixed sleeps, and exits non-zero
if a turn does not arrive. (The full demo, with memories and the token report,
comes with the long-term memory issues.)
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import psycopg

from shared.config import Settings
from shared.localstack.components import ComponentError
from shared.localstack.process import free_port
from shared.localstack.stack import LocalStack, StackError
from shared.waiting import poll

T = TypeVar("T")
PIPELINE_DEADLINE_SECONDS = 60.0

TURNS = [
    (
        "As universal coding preferences across all my projects, I prefer Dark Mode UI "
        "and standardizing on Python 3.11 with PostgreSQL.",
        "Noted: Dark Mode, Python 3.11 and PostgreSQL everywhere.",
    ),
    (
        "For CloudRetail the backend is FastAPI on AlloyDB, and all tool execution "
        "timeouts are capped at 30 seconds.",
        "Understood: FastAPI on AlloyDB, tool timeouts capped at 30 s for CloudRetail.",
    ),
    ("Run the unit tests, please.", "All 42 tests passed."),
]


def _timed_poll(what: str, probe: Callable[[], T | None], deadline: float) -> tuple[T, float]:
    """Poll `probe` until it returns a value; return it and the seconds it took."""
    started = time.monotonic()
    value = poll(probe, deadline, what)
    return value, time.monotonic() - started


def run_demo(settings: Settings, keep: bool = False) -> int:
    data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-demo-"))
    demo_settings = settings.model_copy(
        update={
            "api_port": free_port(),
            "database_url": None,
            "valkey_url": None,
            "pubsub_emulator_host": None,
        }
    )
    stack = LocalStack(demo_settings, data_dir, fast=not keep)
    # SIGTERM (a CI timeout, `kill`) must still stop the stack: make it unwind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"starting a fresh local stack in {data_dir} ...", flush=True)
    try:
        endpoints = stack.start()
    except (StackError, ComponentError) as exc:
        print(f"demo: could not start the stack: {exc}")
        return 1
    print(f"stack up: API {endpoints.api_url}, workers: summary, extraction\n", flush=True)
    try:
        return _play(endpoints.api_url, endpoints.database_url)
    finally:
        stack.stop()
        if keep:
            print(f"data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


def _play(api_url: str, database_url: str) -> int:
    user_id = "user_dev_42"
    session_id = f"sess_demo_{uuid.uuid4().hex[:6]}"
    failures = 0
    with httpx.Client(base_url=api_url, timeout=10) as http:
        recorded = []
        for i, (user, assistant) in enumerate(TURNS, start=1):
            started = time.monotonic()
            response = http.post(
                f"/v1/sessions/{session_id}/turns",
                json={"user_id": user_id, "user": user, "assistant": assistant},
            )
            took = (time.monotonic() - started) * 1000
            if response.status_code != 202:
                print(f"turn {i}: expected 202, got {response.status_code} {response.text}")
                return 1
            body = response.json()
            recorded.append(body["turn_id"])
            print(f"turn {i} recorded: 202 in {took:.1f} ms, event {body['event_id']}")

        def buffered() -> list | None:
            view = http.get(f"/v1/sessions/{session_id}", params={"user_id": user_id}).json()
            return view["turns"] if view["turn_count"] == len(TURNS) else None

        try:
            turns, waited = _timed_poll(
                "the summary worker's buffer", buffered, PIPELINE_DEADLINE_SECONDS
            )
            order_ok = [t["turn_id"] for t in turns] == recorded
            print(
                f"\nsummary worker: {len(turns)} turns in the Valkey buffer after {waited:.2f} s, "
                f"in order: {'yes' if order_ok else 'NO'}"
            )
            for t in turns:
                print(f"  {t['created_at']}  {t['user'][:70]}")
            failures += 0 if order_ok else 1
        except TimeoutError as exc:
            print(f"FAIL: {exc}")
            failures += 1

    def archived() -> int | None:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM episodes WHERE user_id = %s AND session_id = %s",
                (user_id, session_id),
            ).fetchone()
        count = int(row[0]) if row else 0
        return count if count == len(TURNS) else None

    try:
        count, waited = _timed_poll(
            "the extraction worker's archive", archived, PIPELINE_DEADLINE_SECONDS
        )
        print(f"extraction worker: {count} episodes archived in Postgres after {waited:.2f} s")
    except TimeoutError as exc:
        print(f"FAIL: {exc}")
        failures += 1
    print("\nPASS: every turn went API -> Pub/Sub -> both workers" if not failures else "\nFAIL")
    return 0 if not failures else 1
