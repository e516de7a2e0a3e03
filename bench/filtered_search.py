"""Filtered search benchmark: `POST /v1/memories:search` with and without a filter
expression, side by side in one run, for one user with 100,000 memories.

Starts a local stack (as `bench/retrieval.py` does), generates the user's
memories with `bench/retrieval.py`'s sentences, each with metadata: `team` one
of ten (a filter on one team admits a tenth), `level` 0 to 9, `region` one of
three. Loads them with COPY, builds the indexes (the metadata's GIN index among
them), then sends searches in rounds: each round the same new query unfiltered
and with each filter below, in turn, so every kind of request sees the same
machine. Prints p50/p99 of each and its p50 against the unfiltered one's; the
target is at most 1.5. The API keeps the planner's estimate of what a filter
admits for a minute: the last filter is new in every request (a moving "since"),
so it pays for the estimate every time.

Then what the scoped metadata index (`memories_scoped_metadata`) costs a write:
`POST /v1/memories` with metadata, in rounds alternately with the index and
without it (dropped, then built again as its migration defines it), p50 against
p50.

    .venv/bin/python bench/filtered_search.py [--memories 100000] [--rounds 200] [--writes 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import MachineTime, against, bench_stack, describe_machine  # noqa: E402
from bench.retrieval import Client, load, question, sentence  # noqa: E402
from shared.embeddings import make_embedder  # noqa: E402

USER = "bench-filtered"
TEAMS = [f"team{i}" for i in range(10)]
REGIONS = ["emea", "amer", "apac"]


def _since(rng: random.Random) -> dict:
    """A `created_at` range admitting every memory, with a new moment each time."""
    moment = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(10**8))
    return {"created_at": {"gte": moment.isoformat()}}


FILTERS: dict[str, dict | Callable[[random.Random], dict] | None] = {
    "unfiltered": None,
    "team (a tenth)": {"metadata.team": "team3"},
    "team in two (a fifth)": {"metadata.team": {"in": ["team1", "team2"]}},
    "level >= 5 (a half)": {"metadata.level": {"gte": 5}},
    "and/or/not": {
        "and": [
            {"or": [{"metadata.region": "emea"}, {"metadata.region": "apac"}]},
            {"not": {"kind": "rule"}},
            {"metadata.level": {"lt": 8}},
        ]
    },
    "kind and created_at": {
        "kind": {"in": ["fact", "preference"]},
        "created_at": {"gte": "2000-01-01T00:00:00Z"},
    },
    "created_at, new each time": _since,
}
TARGET = 1.5


def metadata(rng: random.Random) -> dict:
    return {"team": rng.choice(TEAMS), "level": rng.randrange(10), "region": rng.choice(REGIONS)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--writes", type=int, default=50, help="per round of each (4 rounds)")
    args = parser.parse_args()
    os.environ.setdefault("AM_POSTGRES_SHARED_BUFFERS", "1GB")
    with bench_stack(services=("api",)) as (stack, endpoints, settings):
        embedder = make_embedder(settings)
        timings = load(
            endpoints.database_url,
            settings.default_app,
            args.memories,
            settings.embedding_dim,
            embedder,
            users=[(USER, args.memories)],
            metadata=metadata,
        )
        print(f"loaded {args.memories} memories: {timings} (seconds)")
        client = Client(endpoints.api_url, stack.dev_api_key or "")
        rng, moments = random.Random(7), random.Random(8)
        for _ in range(20):  # warm-up: connections, plans, the indexes' pages
            for expression in FILTERS.values():
                client.post("/v1/memories:search", _body(question(rng), expression, moments))
        took: dict[str, list[float]] = {name: [] for name in FILTERS}
        found: dict[str, list[int]] = {name: [] for name in FILTERS}
        machine_time = MachineTime()
        for _ in range(args.rounds):
            query = question(rng)
            for name, expression in FILTERS.items():
                ms, answer = client.post("/v1/memories:search", _body(query, expression, moments))
                took[name].append(ms)
                found[name].append(len(answer["memories"]))
        machine = machine_time.report()
        written = _writes(client, endpoints.database_url, args.writes, rng)
    results = against(took, "unfiltered")
    for name, figures in results.items():
        figures["results_min"] = min(found[name])
        ratio = figures["p50_ratio"]
        verdict = "" if name == "unfiltered" else (" PASS" if ratio <= TARGET else " FAIL")
        print(
            f"{name:>25}: p50 {figures['p50_ms']:7.2f} ms, p99 {figures['p99_ms']:7.2f} ms, "
            f"p50 x{ratio:.2f} of unfiltered (target <= {TARGET}){verdict}; "
            f"at least {min(found[name])} results"
        )
    print(f"  {describe_machine(machine)}")
    writes = against(written, "without the index")
    for name, figures in writes.items():
        print(
            f"{'write, ' + name:>32}: p50 {figures['p50_ms']:7.2f} ms, "
            f"p99 {figures['p99_ms']:7.2f} ms, p50 x{figures['p50_ratio']:.2f}"
        )
    summary = {"load_seconds": timings, "rounds": args.rounds, "results": results}
    print(json.dumps(summary | {"writes": writes}))
    return 0


def _writes(client: Client, database_url: str, count: int, rng: random.Random) -> dict:
    """Timings (ms) of `count` memory writes per round, four rounds with the scoped
    metadata index and four without, alternately."""
    took: dict[str, list[float]] = {"with the index": [], "without the index": []}
    with psycopg.connect(database_url, autocommit=True) as conn:
        (definition,) = conn.execute(
            "SELECT pg_get_indexdef('memories_scoped_metadata'::regclass)"
        ).fetchone()
        for _ in range(4):
            for name in took:
                if name == "without the index":
                    conn.execute("DROP INDEX memories_scoped_metadata")
                for _ in range(count):
                    kind, text = sentence(rng)
                    body = {"user_id": USER, "text": text, "kind": kind, "scope": "global"}
                    body["metadata"] = metadata(rng)
                    took[name].append(client.post("/v1/memories", body, expect=201)[0])
                if name == "without the index":
                    conn.execute(definition)
    return took


def _body(
    query: str,
    expression: dict | Callable[[random.Random], dict] | None,
    moments: random.Random,
) -> dict:
    body: dict = {"user_id": USER, "query": query, "k": 10}
    if expression is not None:
        body["filter"] = expression(moments) if callable(expression) else expression
    return body


if __name__ == "__main__":
    raise SystemExit(main())
