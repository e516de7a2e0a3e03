"""`agent-memory demo` (what `make demo` runs): a fresh local stack, a session of
twelve turns recorded through the HTTP API, and what the pipeline makes of them:
each turn readable at once (read-your-writes), the summary worker folding the
oldest turns into the rolling summary once the buffer holds more than ten, the
extraction worker's episode archive, and a next session that carries the
summary over.

It waits by polling with a deadline, never by fixed sleeps, and exits non-zero
if something does not arrive. (The full demo, with memories and the token
report, comes with the long-term memory issues.)
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
    ("Hi! Can you help me set up the new billing service?", "Of course. What stack?"),
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
    ("Never deploy to production on Fridays.", "Got it: no Friday deploys."),
    ("What does the invoice table look like?", "It has id, customer_id, total and status."),
    ("We decided to use Stripe for payments.", "Stripe it is."),
    ("Thanks, that looks right.", "Glad to help."),
    ("Our goal is to launch billing by March.", "I will plan the milestones around March."),
    ("Show me the failing test.", "test_refund_rounding fails on negative totals."),
    ("Fix it by rounding half to even.", "Done: refunds round half to even now."),
    ("Let's call it a day.", "See you next session."),
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
    print(
        f"stack up: API {endpoints.api_url}, workers: summary, extraction, compaction\n", flush=True
    )
    try:
        return _play(endpoints.api_url, endpoints.database_url, stack.dev_api_key or "")
    finally:
        stack.stop()
        if keep:
            print(f"data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


def _play(api_url: str, database_url: str, api_key: str) -> int:
    user_id = "user_dev_42"
    session_id = f"sess_demo_{uuid.uuid4().hex[:6]}"
    params = {"user_id": user_id}
    failures = 0
    auth = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=api_url, timeout=10, headers=auth) as http:

        def session(sid: str) -> dict:
            return http.get(f"/v1/sessions/{sid}", params=params).json()

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
            # Read-your-writes: the next read already holds the turn (or its fold).
            view = session(session_id)
            seen = view["turns_total"] == i
            failures += 0 if seen and body["buffered"] else 1
            print(
                f"turn {i:2d} recorded: 202 in {took:5.1f} ms, buffered: {body['buffered']}, "
                f"readable at once: {'yes' if seen else 'NO'}"
            )

        def folded() -> dict | None:
            view = session(session_id)
            # Done once the worker has folded and the buffer is back within its trigger.
            if view["summary"]["version"] >= 1 and view["turn_count"] <= 10:
                return view
            return None

        try:
            view, waited = _timed_poll(
                "the summary worker's fold", folded, PIPELINE_DEADLINE_SECONDS
            )
            placed = [turn_id for fold in view["folds"] for turn_id in fold["turn_ids"]]
            placed += [t["turn_id"] for t in view["turns"]]
            every_turn_once = placed == recorded
            print(
                f"\nsummary worker: after {waited:.2f} s the rolling summary is at version "
                f"{view['summary']['version']}; {view['folded_turn_count']} turns folded into it, "
                f"{view['turn_count']} newest kept in the buffer; every turn in exactly one place, "
                f"in order: {'yes' if every_turn_once else 'NO'}"
            )
            print(f"  summary ({view['summary']['tokens']} tokens): {view['summary']['text']}")
            for t in view["turns"]:
                print(f"  buffer: {t['created_at']}  {t['user'][:70]}")
            failures += 0 if every_turn_once else 1
        except TimeoutError as exc:
            print(f"FAIL: {exc}")
            failures += 1

        next_session = session_id + "_next"
        response = http.post(
            f"/v1/sessions/{next_session}/turns",
            json={
                "user_id": user_id,
                "prev_session_id": session_id,
                "user": "Where were we?",
                "assistant": "Continuing from last session.",
            },
        )
        if response.status_code != 202:
            print(f"next session: expected 202, got {response.status_code} {response.text}")
            return 1
        carried = session(next_session)["carried_summary"]
        carried_ok = bool(carried) and carried["session_id"] == session_id
        print(
            f"\nnext session {next_session} carries the previous summary "
            f"(version {carried['version'] if carried else '-'}): {'yes' if carried_ok else 'NO'}"
        )
        failures += 0 if carried_ok else 1

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
