"""Pipeline benchmark: turn events through Pub/Sub to one summary worker process.

Starts a local stack (PostgreSQL, Valkey, the Pub/Sub emulator, the API and ONE
summary worker process, as `agent-memory up` does) in a temporary folder, then:

  1. lag at a fixed rate (default 200 events/s), straight to Pub/Sub and through the
     API (`POST /v1/sessions/{id}/turns`): publish-to-applied p50/p99;
  2. throughput: with the worker stopped, queues a backlog straight into Pub/Sub,
     starts the worker and measures how fast it applies the backlog (events/s over
     the window from its first to its last applied event).

Every phase uses the same 100 sessions, first seen during a warm-up: the
emulator creates threads for each new ordering key (a session), which would
otherwise show as latency at the start of each phase. The figures are steady
state.

"Applied" is the moment the worker logged the message as handled, which it does
after the Valkey effect (append, and a fold when the buffer is over its trigger)
and the ack: the timestamp of its log line. Through the API the turn is in the
buffer before the API answers, so the worker's append is a no-op ("duplicate")
and its lag is the time until the worker has checked the triggers and folded. Publish time is
taken just before the publish call (or the HTTP request). Both clocks are this
machine's.

    .venv/bin/python bench/pipeline.py [--burst 10000] [--rate 200] [--seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (  # noqa: E402
    AppliedLog,
    MachineTime,
    bench_stack,
    cpu_seconds,
    cpu_used,
    describe_machine,
    percentile,
    wait_applied,
)
from services.dev.localstack.stack import Endpoints, LocalStack  # noqa: E402
from shared.bus.publisher import EventPublisher  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.events import TurnRecorded, derived_event_id  # noqa: E402

APP = "default"  # the API's tenant until API keys exist
SESSIONS = 100


def turn(run: str, n: int) -> TurnRecorded:
    session = f"bench-session-{n % SESSIONS}"
    turn_id = f"{run}-t{n}"
    return TurnRecorded(
        event_id=derived_event_id(APP, "bench-user", session, turn_id),
        app=APP,
        user_id="bench-user",
        session_id=session,
        turn_id=turn_id,
        created_at=datetime.now(UTC),
        user=f"question number {n} about the build",
        assistant=f"answer number {n}: the build is green",
    )


def publish_all(publisher: EventPublisher, events: list[TurnRecorded]) -> None:
    for start in range(0, len(events), 1000):
        futures = [publisher.publish(e) for e in events[start : start + 1000]]
        for f in futures:
            f.result(timeout=120)


def backlog_drain(
    stack: LocalStack, publisher: EventPublisher, log: AppliedLog, count: int
) -> dict:
    """Stop the worker, queue `count` events, start it, time the drain."""
    worker = stack.service_procs["summary"]
    worker.request_stop()
    worker.wait(30)
    run = uuid.uuid4().hex[:6]
    events = [turn(run, n) for n in range(count)]
    publish_all(publisher, events)
    before = cpu_seconds(stack)
    stack.start_service("summary")
    seen = wait_applied(log, [e.event_id for e in events], timeout=600)
    cpu = cpu_used(stack, before)
    times = sorted(seen[e.event_id] for e in events)
    window = times[-1] - times[0]
    return {
        "events": count,
        "drain_seconds": round(window, 3),
        "applied_per_second": round(count / window, 1),
        "cpu_seconds_by_process": cpu,
    }


def warm_up(publisher: EventPublisher, log: AppliedLog) -> None:
    run = uuid.uuid4().hex[:6]
    events = [turn(run, n) for n in range(500)]
    publish_all(publisher, events)
    wait_applied(log, [e.event_id for e in events], timeout=120)


def paced(send: Callable[[int], str], count: int, rate: float) -> dict[str, float]:
    """Open-loop load: the n-th `send(n)` starts at t0 + n/rate, whatever earlier sends
    took (16 threads take the sends in order). Returns event_id -> start time."""
    sent: dict[str, float] = {}
    lock = threading.Lock()
    t0 = time.monotonic() + 0.2
    wall0 = time.time() + 0.2
    next_n = iter(range(count))

    def sender() -> None:
        while True:
            with lock:
                n = next(next_n, None)
            if n is None:
                return
            time.sleep(max(0.0, t0 + n / rate - time.monotonic()))
            at = wall0 + (time.monotonic() - t0)
            event_id = send(n)
            with lock:
                sent[event_id] = at

    threads = [threading.Thread(target=sender) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent


def http_sender(
    api_url: str, api_key: str, run: str, response_ms: list[float]
) -> Callable[[int], str]:
    """record-turn over plain `http.client` keep-alive connections, one per thread: the
    client must not tax the 2 cores the stack under test runs on (httpx costs
    several times more CPU per request)."""
    host, port = api_url.removeprefix("http://").split(":")
    local = threading.local()

    def send(n: int) -> str:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        body = {"user_id": "bench-user", "turn_id": f"{run}-t{n}", "user": "q", "assistant": "a"}
        started = time.perf_counter()
        local.conn.request(
            "POST",
            f"/v1/sessions/bench-session-{n % SESSIONS}/turns",
            body=json.dumps(body),
            headers={"content-type": "application/json", "authorization": f"Bearer {api_key}"},
        )
        response = local.conn.getresponse()
        payload = response.read()
        response_ms.append((time.perf_counter() - started) * 1000)
        if response.status != 202:
            raise SystemExit(f"record-turn answered {response.status}: {payload[:200]!r}")
        return json.loads(payload)["event_id"]

    return send


def lag(label: str, sent: dict[str, float], log: AppliedLog) -> dict:
    seen = wait_applied(log, list(sent), timeout=300)
    lags = [(seen[e] - t) * 1000 for e, t in sent.items()]
    by_time = [lag_ms for _t, lag_ms in sorted(zip(sent.values(), lags, strict=True))]
    tenth = max(1, len(by_time) // 10)
    slices = [by_time[i : i + tenth] for i in range(0, len(by_time), tenth)]
    return {
        "lag_ms_p99_by_tenth": [round(percentile(s, 99), 1) for s in slices],
        "path": label,
        "events": len(lags),
        "lag_ms_p50": round(statistics.median(lags), 1),
        "lag_ms_p99": round(percentile(lags, 99), 1),
        "lag_ms_max": round(max(lags), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--skip-burst", action="store_true")
    args = parser.parse_args()
    with bench_stack() as (stack, endpoints, settings):
        run(args, stack, endpoints, settings)
    return 0


def run(
    args: argparse.Namespace, stack: LocalStack, endpoints: Endpoints, settings: Settings
) -> None:
    log = AppliedLog(stack.log_dir / "summary.log")
    run_settings = settings.model_copy(
        update={"pubsub_emulator_host": endpoints.pubsub_emulator_host}
    )
    publisher = EventPublisher(run_settings)
    results: dict = {"worker_processes": 1}
    try:
        # Warm up the path (connections, JIT of the emulator) before measuring.
        warm_up(publisher, log)
        machine_time = MachineTime()
        count = int(args.rate * args.seconds)
        direct_run = uuid.uuid4().hex[:6]

        def send_direct(n: int) -> str:
            event = turn(direct_run, n)
            publisher.publish(event).result(timeout=30)
            return event.event_id

        results["lag_direct"] = lag("Pub/Sub publish", paced(send_direct, count, args.rate), log)

        api_run = uuid.uuid4().hex[:6]
        response_ms: list[float] = []
        cpu_before = cpu_seconds(stack)
        sent = paced(
            http_sender(endpoints.api_url, stack.dev_api_key or "", api_run, response_ms),
            count,
            args.rate,
        )
        results["lag_api"] = lag("HTTP API", sent, log)
        results["lag_api"]["cpu_seconds_by_process"] = cpu_used(stack, cpu_before)
        results["lag_api"]["response_ms_p50"] = round(statistics.median(response_ms), 1)
        results["lag_api"]["response_ms_p99"] = round(percentile(response_ms, 99), 1)
        if not args.skip_burst:
            results["throughput"] = backlog_drain(stack, publisher, log, args.burst)
        results["machine"] = machine_time.report()

    finally:
        publisher.stop()

    t = results.get("throughput")
    if t:
        print(
            f"\nthroughput, one summary worker process: {t['applied_per_second']} events/s "
            f"applied ({t['events']} queued events drained in {t['drain_seconds']} s)"
            "  target >= 1000"
        )
    for key in ("lag_direct", "lag_api"):
        r = results[key]
        print(
            f"lag at {args.rate:.0f} events/s via {r['path']}: p50 {r['lag_ms_p50']} ms, "
            f"p99 {r['lag_ms_p99']} ms, max {r['lag_ms_max']} ms ({r['events']} events)"
            f"  target p99 < 150 ms"
        )
    print(describe_machine(results["machine"]))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    raise SystemExit(main())
