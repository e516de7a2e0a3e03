"""Permission benchmark: the latency of `POST /v1/permissions:evaluate` for a user
with 1,000 rules, through the HTTP API of a real stack.

Starts a local stack (Postgres, Valkey, the Pub/Sub emulator and the API, as
`agent-memory up` does) in a temporary folder and writes 1,000 rules for one
user through the API: 700 for the project, 300 global, all for the evaluated
tool, so every evaluation matches the command against all 1,000 patterns (the
worst case: rules for other tools are not even read). Then `--clients` threads,
one keep-alive connection each, evaluate in a closed loop for `--seconds`,
rotating four calls: one a project ALLOW rule decides, one a project BLOCK rule
decides, one no rule matches (PENDING), and an exempt tool.

Each evaluation also tries to consume an allow-once grant (one GETDEL). The
candidate rules are cached for AM_PERMISSION_CACHE_SECONDS (2 s by default), so
the run includes their re-reads from Postgres; `--cache-seconds 0` reads them
on every call.

    .venv/bin/python bench/permissions.py [--clients 1] [--seconds 10] [--cache-seconds 2]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import MachineTime, bench_stack, describe_machine, percentile  # noqa: E402

USER = "bench-user"
PROJECT = "bench-project"
TOOL = "run_shell"
RULES = 1000
PROJECT_RULES = 700

# (tool, command, the expected decision and tier)
CALLS = [
    (TOOL, "pytest tests/unit -q --timeout=30", ("ALLOW", "project")),
    (TOOL, "rm -rf /var/lib/data", ("BLOCK", "project")),
    (TOOL, "ls -la /srv/app", ("PENDING", "none")),
    ("search_archived_memory", "deploy notes", ("ALLOW", "exempt")),
]


class Api:
    """One keep-alive connection to the API."""

    def __init__(self, api_url: str, api_key: str) -> None:
        host, port = api_url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.headers = {"content-type": "application/json", "authorization": f"Bearer {api_key}"}

    def post(self, path: str, body: dict) -> tuple[float, int, dict]:
        started = time.perf_counter()
        self.conn.request("POST", path, body=json.dumps(body), headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        return (time.perf_counter() - started) * 1000, response.status, json.loads(data)


def rule_bodies() -> list[dict]:
    """1,000 rules of the kinds people write: tool prefixes, flags, paths."""
    bodies = []
    for i in range(RULES):
        project = PROJECT if i < PROJECT_RULES else "global"
        pattern, action = [
            (rf"^tool{i} --flag=[0-9]+( |$)", "ALLOW"),
            (rf"rm -rf /mnt/volume{i}\b", "BLOCK"),
            (rf"curl .*internal{i}\.example\.com", "BLOCK"),
            (rf"^make target{i}(-[a-z]+)*$", "ALLOW"),
        ][i % 4]
        bodies.append((project, pattern, action))
    # The two rules the benchmark's calls hit, among the others.
    bodies[350] = (PROJECT, r"^pytest .*--timeout=30", "ALLOW")
    bodies[351] = (PROJECT, r"rm -rf .*", "BLOCK")
    return [
        {"user_id": USER, "project_id": p, "tool_name": TOOL, "pattern": pat, "action": a}
        for p, pat, a in bodies
    ]


class Client(threading.Thread):
    def __init__(self, api_url: str, api_key: str, offset: int, until: float) -> None:
        super().__init__(daemon=True)
        self.api = Api(api_url, api_key)
        self.offset = offset
        self.until = until
        self.latencies: list[float] = []
        self.by_decision: dict[str, list[float]] = {}
        self.errors: list[str] = []

    def run(self) -> None:
        n = self.offset
        while time.monotonic() < self.until:
            tool, command, expected = CALLS[n % len(CALLS)]
            body = {
                "user_id": USER,
                "project_id": PROJECT,
                "session_id": f"bench-session-{self.offset}",
                "tool_name": tool,
                "tool_args": {"CommandLine": command},
            }
            took, status, answer = self.api.post("/v1/permissions:evaluate", body)
            got = (answer.get("decision"), answer.get("tier"))
            if status != 200 or got != expected:
                self.errors.append(f"{command!r}: {status} {answer}")
            self.latencies.append(took)
            self.by_decision.setdefault(f"{got[0]} {got[1]}", []).append(took)
            n += 1


def run_clients(api_url: str, api_key: str, count: int, seconds: float) -> list[Client]:
    until = time.monotonic() + seconds
    clients = [Client(api_url, api_key, i, until) for i in range(count)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    return clients


def summarize(values: list[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50": round(statistics.median(values), 2),
        "p95": round(percentile(values, 95), 2),
        "p99": round(percentile(values, 99), 2),
        "max": round(max(values), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--cache-seconds", type=float, default=None)
    args = parser.parse_args()
    sys.setswitchinterval(0.0005)  # client threads share this process's GIL
    if args.cache_seconds is not None:
        # The API child inherits this process's environment.
        os.environ["AM_PERMISSION_CACHE_SECONDS"] = str(args.cache_seconds)
    with bench_stack(services=("api",)) as (stack, endpoints, settings):
        key = stack.dev_api_key or ""
        writer = Api(endpoints.api_url, key)
        write_ms = []
        for body in rule_bodies():
            took, status, answer = writer.post("/v1/permissions/rules", body)
            if status != 201:
                raise SystemExit(f"rule not written: {status} {answer}")
            write_ms.append(took)
        run_clients(endpoints.api_url, key, args.clients, 2.0)  # warm up
        machine_time = MachineTime()
        clients = run_clients(endpoints.api_url, key, args.clients, args.seconds)
        machine = machine_time.report()
        cache_seconds = float(
            os.environ.get("AM_PERMISSION_CACHE_SECONDS", settings.permission_cache_seconds)
        )

    errors = [e for c in clients for e in c.errors]
    if errors:
        print(f"{len(errors)} evaluations failed or decided wrongly, first: {errors[0]}")
        return 1
    latencies = [v for c in clients for v in c.latencies]
    by_decision: dict[str, list[float]] = {}
    for c in clients:
        for name, values in c.by_decision.items():
            by_decision.setdefault(name, []).extend(values)
    results = {
        "rules": RULES,
        "clients": args.clients,
        "rule_cache_seconds": cache_seconds,
        "evaluations": len(latencies),
        "evaluations_per_second": round(len(latencies) / args.seconds, 1),
        "evaluate_ms": summarize(latencies),
        "evaluate_ms_by_decision": {name: summarize(v) for name, v in by_decision.items()},
        "write_rule_ms_p50": round(statistics.median(write_ms), 2),
        "machine": machine,
    }
    e = results["evaluate_ms"]
    print(
        f"\nevaluate with {RULES} rules, {args.clients} client(s), rule cache "
        f"{cache_seconds} s: {results['evaluations_per_second']} evaluations/s, "
        f"p50 {e['p50']} ms, p99 {e['p99']} ms, max {e['max']} ms (target p99 < 5 ms)"
    )
    print(describe_machine(machine))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
