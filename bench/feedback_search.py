"""Feedback in the ranking: the memory search's statement with feedback weighing
the scores (`AM_SEARCH_FEEDBACK_WEIGHT` 0.25) and without it (0), side by side
in one run, for one user whose memories have feedback.

Starts a local stack (as `bench/filtered_search.py` does), loads the user's
memories with `bench/retrieval.py`'s sentences, and gives a share of them
(`--rated`, a tenth by default) feedback from one to five callers, some more than
once (a caller's latest counts). Then sends the statement itself
(`shared.db.search.search_memories`) on one connection in rounds: each round the
same new query with the weight and without, in turn, so both see the same
machine. Prints p50/p99 of each and the weighted one's p50 against the other's.

    .venv/bin/python bench/feedback_search.py [--memories 100000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import MachineTime, against, bench_stack, describe_machine  # noqa: E402
from bench.retrieval import load, question  # noqa: E402
from shared.db.run import run  # noqa: E402
from shared.db.search import search_memories  # noqa: E402
from shared.embeddings import make_embedder  # noqa: E402
from shared.memory.ranking import Fusion, Scope  # noqa: E402

USER = "bench-feedback"
RATINGS = ("useful", "not_useful")


def rate(database_url: str, app: str, share: float) -> int:
    """Feedback on `share` of the user's memories: each from 1 to 5 callers, a
    caller's feedback given once or twice. Returns the rows written."""
    rng = random.Random(11)
    with psycopg.connect(database_url, autocommit=True) as conn:
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM memories WHERE app = %s AND user_id = %s ORDER BY id", (app, USER)
            )
        ]
        rows = []
        for memory_id in rng.sample(ids, int(len(ids) * share)):
            for caller in range(rng.randint(1, 5)):
                for _ in range(rng.randint(1, 2)):
                    rows.append((memory_id, app, USER, rng.choice(RATINGS), f"key:k{caller}"))
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_feedback (memory_id, app, user_id, rating, source) "
                "VALUES (%s, %s, %s, %s, %s)",
                rows,
            )
        conn.execute("ANALYZE memory_feedback")
    return len(rows)


def main() -> int:
    os.environ.setdefault("AM_POSTGRES_SHARED_BUFFERS", "1GB")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--rated", type=float, default=0.1, help="share of memories rated")
    args = parser.parse_args()
    with bench_stack(services=()) as (_stack, endpoints, settings):
        embedder = make_embedder(settings)
        app = settings.default_app
        timings = load(
            endpoints.database_url,
            app,
            args.memories,
            settings.embedding_dim,
            embedder,
            users=[(USER, args.memories)],
        )
        feedback = rate(endpoints.database_url, app, args.rated)
        print(f"loaded {args.memories} memories, {feedback} feedback rows: {timings} (seconds)")
        weighted = Fusion.from_settings(
            settings.model_copy(update={"search_feedback_weight": 0.25})
        )
        variants = {
            "without feedback": replace(weighted, feedback_weight=0.0),
            "with feedback": weighted,
        }
        scope = Scope(app, USER)
        rng = random.Random(7)
        took: dict[str, list[float]] = {name: [] for name in variants}
        with psycopg.connect(endpoints.database_url, autocommit=True) as conn:

            def search(query: str, embedding, fusion: Fusion) -> float:
                started = time.perf_counter()
                run(conn, search_memories(scope, [query], [embedding], 10, fusion))
                return (time.perf_counter() - started) * 1000

            for _ in range(20):  # warm-up: plans, the indexes' pages
                query = question(rng)
                embedding = embedder.embed([query])[0]
                for fusion in variants.values():
                    search(query, embedding, fusion)
            machine_time = MachineTime()
            for _ in range(args.rounds):
                query = question(rng)
                embedding = embedder.embed([query])[0]
                for name, fusion in variants.items():
                    took[name].append(search(query, embedding, fusion))
            machine = machine_time.report()
    results = against(took, "without feedback")
    for name, figures in results.items():
        print(
            f"{name:>17}: p50 {figures['p50_ms']:7.2f} ms, p99 {figures['p99_ms']:7.2f} ms, "
            f"p50 x{figures['p50_ratio']:.2f} of without"
        )
    print(f"  {describe_machine(machine)}")
    print(json.dumps({"load_seconds": timings, "rounds": args.rounds, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
