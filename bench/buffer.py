"""Session buffer benchmark: the record-turn and session-view latency of the read API
at 50 concurrent sessions, and the Valkey operations per turn.

Starts a local stack (Valkey, the Pub/Sub emulator, Postgres, the API and the
summary worker, as `agent-memory up` does) in a temporary folder. Then 50
sessions, one thread and one keep-alive connection each, each record a turn and
read their session view, one turn every `--interval` seconds per session
(staggered, open loop: a slow answer does not lower the offered load). Sessions
grow past the trigger, so the summary worker folds while the API serves.

Two phases of `--seconds` each, differing only in when a session reads its view:

- `after_turn`: right after its own turn is recorded. The sessions are staggered
  evenly, so a view meets no other session's request in the API.
- `random_moment`: at a random moment of each interval, drawn anew every
  interval (from a generator seeded by the session's place, so every run draws
  the same moments), as an agent reads its context when its user speaks, independent of the
  other sessions. Views then meet other sessions' record-turns and what follows
  them (the publish, the emulator, the summary worker), as under real traffic.

Record-turn latency is measured by the client and reported twice: in full, and
without the wait for Pub/Sub's publish confirmation, which the API reports in
its `Server-Timing` header (`publish;dur=`). The session view's latency is
reported as the client measured it (the target) and as the API did (`app;dur=`,
until it started to answer): the difference is the network, the client and the
scheduling of both on this machine. Valkey operations come from
`INFO commandstats` before and after both phases, divided by the turns recorded;
they include the summary worker's (its append, its fold checks and folds).

One turn per session per second is an agent's pace at most (a turn waits for an
LLM); 50 sessions then offer 50 turns/s and 50 views/s. `--interval 0.25`
quadruples that and saturates the API process on this 2-core machine, where
the Pub/Sub emulator takes about half a core.

    .venv/bin/python bench/buffer.py [--sessions 50] [--interval 1.0] [--seconds 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import valkey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common  # noqa: E402

# What the API and the worker send on these paths: scripts, and the HMGET of a
# carried summary. Everything else (SET, GET, DEL, HGET, ...) runs inside the scripts.
ROUND_TRIP_COMMANDS = {"evalsha", "hmget"}

# The two phases, in the order they run: when each session reads its view.
PHASES = {
    "after_turn": "views right after the session's own turn",
    "random_moment": "views at a random moment of each interval",
}


class Session(threading.Thread):
    """One agent session: record a turn, read the view, every `interval` seconds."""

    def __init__(
        self,
        api_url: str,
        api_key: str,
        session_id: str,
        start_at: float,
        interval: float,
        until: float,
        view_moments: random.Random | None = None,
    ):
        """`view_moments`: draws, for each interval, when in it to read the view;
        None: right after the turn."""
        super().__init__(daemon=True)
        host, port = api_url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.auth = {"authorization": f"Bearer {api_key}"}
        self.session_id = session_id
        self.start_at = start_at
        self.interval = interval
        self.until = until
        self.view_moments = view_moments
        self.record_ms: list[float] = []
        self.record_without_publish_ms: list[float] = []
        self.view_ms: list[float] = []
        self.view_in_api_ms: list[float] = []
        self.event_ids: list[str] = []
        self.errors: list[str] = []

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[float, dict, dict]:
        started = time.perf_counter()
        payload = json.dumps(body) if body is not None else None
        headers = (
            {"content-type": "application/json", **self.auth} if body is not None else self.auth
        )
        self.conn.request(method, path, body=payload, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        took = (time.perf_counter() - started) * 1000
        if response.status >= 300:
            self.errors.append(f"{method} {path}: {response.status} {data[:200]!r}")
        return took, dict(response.getheaders()), json.loads(data)

    def run(self) -> None:
        n = 0
        while True:
            due = self.start_at + n * self.interval
            if due >= self.until:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            body = {
                "user_id": "bench-user",
                "user": f"In step {n} I prefer option {n % 7}; the build must stay green.",
                "assistant": f"Noted for step {n}: option {n % 7}.",
            }
            took, headers, answer = self._call(
                "POST", f"/v1/sessions/{self.session_id}/turns", body
            )
            self.event_ids.append(answer.get("event_id", ""))
            self.record_ms.append(took)
            self.record_without_publish_ms.append(took - _timing(headers, "publish"))
            if self.view_moments is not None:
                moment = due + self.view_moments.uniform(0.0, self.interval)
                time.sleep(max(0.0, moment - time.monotonic()))
            took, headers, _ = self._call(
                "GET", f"/v1/sessions/{self.session_id}?user_id=bench-user"
            )
            self.view_ms.append(took)
            self.view_in_api_ms.append(_timing(headers, "app"))
            n += 1


def _timing(headers: dict, name: str) -> float:
    """The `name` entry of a response's Server-Timing header, in ms."""
    timing = headers.get("server-timing") or headers.get("Server-Timing") or ""
    for part in timing.split(","):
        entry, _, dur = part.strip().partition(";dur=")
        if entry == name:
            return float(dur)
    raise SystemExit(f"no {name} timing in the response: {headers}")


def commandstats(client: valkey.Valkey) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def run_sessions(
    api_url: str,
    api_key: str,
    count: int,
    interval: float,
    seconds: float,
    random_views: bool = False,
) -> list[Session]:
    """`count` sessions staggered evenly over one interval; with `random_views`,
    each reads its view at a random moment of each interval (seeded by its place,
    so every run draws the same moments), not right after its turn."""
    run = uuid.uuid4().hex[:6]
    t0 = time.monotonic() + 0.5
    sessions = [
        Session(
            api_url,
            api_key,
            f"bench-{run}-{i}",
            t0 + i * interval / count,
            interval,
            t0 + seconds,
            random.Random(i) if random_views else None,
        )
        for i in range(count)
    ]
    for s in sessions:
        s.start()
    for s in sessions:
        s.join()
    return sessions


def summarize(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 2),
        "p99": round(common.percentile(values, 99), 2),
        "max": round(max(values), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    # 50 client threads share this process's GIL: with the default 5 ms switch
    # interval, a thread whose answer has arrived could wait that long to read it.
    sys.setswitchinterval(0.0005)
    phases, valkey_calls, cpu = measure(args)
    everyone = [s for sessions, _ in phases.values() for s in sessions]
    errors = [e for s in everyone for e in s.errors]
    if errors:
        print(f"{len(errors)} requests failed, first: {errors[0]}")
        return 1
    turns = sum(len(s.record_ms) for s in everyone)
    round_trips = sum(calls for name, calls in valkey_calls.items() if name in ROUND_TRIP_COMMANDS)
    results = {
        "sessions": args.sessions,
        "turns_per_second": round(turns / args.seconds / len(PHASES), 1),
        **{phase: phase_figures(*phases[phase]) for phase in PHASES},
        "valkey_round_trips_per_turn": round(round_trips / turns, 2),
        "valkey_commands_per_turn": round(sum(valkey_calls.values()) / turns, 2),
        "valkey_commands_by_name": dict(sorted(valkey_calls.items(), key=lambda kv: -kv[1])),
        "cpu_seconds_by_process": cpu,
    }
    print_results(args.sessions, results)
    return 0


Phases = dict[str, tuple[list[Session], dict[str, float]]]


def measure(args: argparse.Namespace) -> tuple[Phases, dict[str, int], dict[str, float]]:
    """A warm-up, then both phases on a fresh stack: each phase's sessions and the
    machine's state during it, the Valkey calls of both phases by command (the
    worker's included), and the CPU seconds of each process."""
    with common.bench_stack() as (stack, endpoints, _settings):
        client = valkey.Valkey.from_url(endpoints.valkey_url)
        key = stack.dev_api_key or ""
        try:
            log = common.AppliedLog(stack.log_dir / "summary.log")
            warm = run_sessions(endpoints.api_url, key, args.sessions, args.interval, 3.0)
            common.wait_applied(log, [e for s in warm for e in s.event_ids], timeout=120)
            before, cpu_before = commandstats(client), common.cpu_seconds(stack)
            phases: Phases = {}
            for phase in PHASES:
                machine_time = common.MachineTime()
                sessions = run_sessions(
                    endpoints.api_url,
                    key,
                    args.sessions,
                    args.interval,
                    args.seconds,
                    random_views=phase == "random_moment",
                )
                phases[phase] = (sessions, machine_time.report())
            # Count the worker's operations for these turns too: wait until it handled them.
            everyone = [s for sessions, _ in phases.values() for s in sessions]
            common.wait_applied(log, [e for s in everyone for e in s.event_ids], timeout=120)
            after, cpu = commandstats(client), common.cpu_used(stack, cpu_before)
        finally:
            client.close()
    delta = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    delta = {name: calls for name, calls in delta.items() if calls > 0 and name != "info"}
    return phases, delta, cpu


def print_results(sessions: int, results: dict) -> None:
    print(
        f"\n{sessions} concurrent sessions, {results['turns_per_second']} turns/s and as "
        "many views/s; targets: record-turn p99 < 10 ms without the publish wait, "
        "session view p99 < 5 ms"
    )
    for phase in PHASES:
        figures = results[phase]
        record, full = figures["record_turn_without_publish_wait_ms"], figures["record_turn_ms"]
        view, in_api = figures["session_view_ms"], figures["session_view_in_api_ms"]
        print(
            f"{PHASES[phase]}:\n"
            f"  session view: p50 {view['p50']} ms, p99 {view['p99']} ms; "
            f"inside the API p50 {in_api['p50']} ms, p99 {in_api['p99']} ms\n"
            f"  record-turn: p50 {record['p50']} ms, p99 {record['p99']} ms without the "
            f"publish wait; with it p50 {full['p50']} ms, p99 {full['p99']} ms\n"
            f"  {common.describe_machine(figures['machine'])}"
        )
    print(
        f"Valkey per turn: {results['valkey_round_trips_per_turn']} round trips, "
        f"{results['valkey_commands_per_turn']} commands (API and summary worker)"
    )
    print(json.dumps(results, indent=2))


def phase_figures(sessions: list[Session], machine: dict[str, float]) -> dict:
    return {
        "turns": sum(len(s.record_ms) for s in sessions),
        "record_turn_ms": summarize([v for s in sessions for v in s.record_ms]),
        "record_turn_without_publish_wait_ms": summarize(
            [v for s in sessions for v in s.record_without_publish_ms]
        ),
        "session_view_ms": summarize([v for s in sessions for v in s.view_ms]),
        "session_view_in_api_ms": summarize([v for s in sessions for v in s.view_in_api_ms]),
        "machine": machine,
    }


if __name__ == "__main__":
    raise SystemExit(main())
