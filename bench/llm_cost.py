"""The write path's cost: what the extraction worker spends on the model per
turn, with every turn sent to the model on its own against the default
extraction windows, measured on the real pipeline in one run.

Two modes, one after the other in one local stack (PostgreSQL, Valkey, the
Pub/Sub emulator, the API and one extraction worker as processes; no summary or
compaction worker), the worker's `gemini` LLM and embeddings pointed at the fake
Gemini endpoint in a process of its own (bench/slow_gemini.py: generateContent
800 ms and embeddings 150 ms, +-25%; its model answers as the offline `rules`
provider and reports Gemini-style usage):

- `window 1`: AM_EXTRACTION_WINDOW_TURNS=1 and AM_EXTRACTION_FILTER=false: every
  turn goes to the model on its own;
- `default`: the default window (`AM_EXTRACTION_WINDOW_TURNS`, 5 turns) with the filter on.

Each mode:

1. Paced play through the API: `--users` generated recall conversations
   (bench/recall_data.py), each one user playing its first `--sessions` sessions
   one after another (each naming the previous as `prev_session_id`), all users
   at once; a turn every `--pace` seconds per session (POST
   /v1/sessions/{id}/turns), the session flushed at its end (POST
   /v1/sessions/{id}:flush); then polled until every turn has its ledger row.
   From the worker's metrics before and after: the model calls (each HTTP
   attempt) and prompt/output tokens of the purposes extract and consolidate per
   turn, embeddings apart; from Postgres: the time from a turn's 202 to the first
   revision of its memory (p50/p95 over the turns that produced one), the live
   memories and the revisions written.
2. Drain: with the worker stopped, a backlog (`--drain-sessions` later sessions
   per conversation, each a user of its own, cut to `--drain-turns` turns the
   filter keeps, a multiple of the window, so that every window closes full and
   the drain never waits for the idle-window check) published straight to Pub/Sub; one
   replica at concurrency 32; turns/s from the first archived turn to the last
   ledger row.
3. The worker's transaction p99 over the play and the drain, from the histogram
   agent_memory_db_transaction_seconds, interpolated within its bucket as
   Prometheus's histogram_quantile does (and each phase's apart).

The worker's log says how many windows it extracted and of how many turns.

Then, in the default mode, the same drain with AM_DB_POOL_SIZE=4 and =32,
interleaved (4, 32, 4, 32). Targets (PASS/FAIL, not tuned for): calls/turn
<= x0.3 and tokens/turn <= x0.4 of window 1's, transaction p99 <= 100 ms, the
pool of 4 draining at >= 0.9 of the pool of 32. The last line is
`llm cost: calls/turn x<r>, tokens/turn x<r>, transaction p99 <ms> ms`.

    .venv/bin/python bench/llm_cost.py [--users 20] [--sessions 2] [--pace 2.0]
        [--drain-sessions 3] [--drain-turns 3 windows] [--generate-ms 800] [--embed-ms 150]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import llm_cost_play as play  # noqa: E402
from bench.common import MachineTime, bench_stack, cpu_seconds, describe_machine  # noqa: E402
from bench.llm_cost_metrics import (  # noqa: E402
    SKIPPED,
    Scrape,
    is_embedding,
    is_model,
    purpose,
    usage,
)
from bench.llm_cost_report import DRAIN_CONCURRENCY, last_line, report, transactions  # noqa: E402
from bench.pipeline import publish_all  # noqa: E402
from bench.scaling import start_gemini  # noqa: E402
from services.dev.localstack.stack import LocalStack  # noqa: E402
from shared.bus.publisher import EventPublisher  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.waiting import poll  # noqa: E402

WORKER = "extraction"


@dataclass(frozen=True)
class Mode:
    name: str
    env: dict[str, str]  # the worker's settings; unset: the defaults
    about: str


WINDOW = Settings.model_fields["extraction_window_turns"].default

MODES = (
    Mode(
        "window 1",
        {"AM_EXTRACTION_WINDOW_TURNS": "1", "AM_EXTRACTION_FILTER": "false"},
        "AM_EXTRACTION_WINDOW_TURNS=1, AM_EXTRACTION_FILTER=false: every turn to the model "
        "on its own",
    ),
    Mode("default", {}, f"the default window ({WINDOW} turns), the filter on"),
)
SETTINGS = ("AM_EXTRACTION_WINDOW_TURNS", "AM_EXTRACTION_FILTER", "AM_DB_POOL_SIZE")


class Worker:
    """The one extraction worker process, started with a mode's settings; its
    metrics scraped when it answers and before it stops."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.log = stack.log_dir / f"{WORKER}.log"
        self.offset = 0

    def windows(self) -> list[int]:
        """The turns of each window the process extracted since its start (its log's
        "window extracted" lines)."""
        with open(self.log, "rb") as f:
            f.seek(self.offset)
            lines = f.read().splitlines()
        return [json.loads(line)["turns"] for line in lines if b'"window extracted"' in line]

    def start(self, mode: Mode, concurrency: int | None, pool: int | None = None) -> Scrape:
        for name in SETTINGS:  # the stack hands this process's environment to its children
            os.environ.pop(name, None)
        os.environ.update(mode.env)
        if pool is not None:
            os.environ["AM_DB_POOL_SIZE"] = str(pool)
        self.stack.settings = self.stack.settings.model_copy(
            update={"worker_concurrency": concurrency}
        )
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        self.stack.start_replicas(WORKER, 1)
        return poll(self._try_scrape, 60, "the extraction worker's metrics", interval=0.1)

    def _try_scrape(self) -> Scrape | None:
        self.check()
        try:
            return self.scrape()
        except httpx.HTTPError:
            return None

    def scrape(self) -> Scrape:
        port = self.stack.metrics_ports[WORKER]
        return Scrape.parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)

    def cpu(self) -> float:
        """CPU seconds the worker process has used (its Postgres backends are not in it)."""
        return cpu_seconds(self.stack)[WORKER]

    def check(self) -> None:
        proc = self.stack.service_procs[WORKER]
        if not proc.running:
            raise SystemExit(f"the extraction worker exited; see {proc.log_path}")

    def stop(self) -> tuple[Scrape, list[int]]:
        """The process's last metrics and the sizes of the windows it extracted."""
        last = self.scrape()
        self.stack.stop_services([WORKER])
        return last, self.windows()

    def wait_extracted(self, db: psycopg.Connection, event_ids: list[str], timeout: float) -> None:
        def done() -> bool:
            self.check()
            return play.extracted(db, event_ids) >= len(event_ids)

        try:
            poll(done, timeout, f"{len(event_ids)} turns extracted", interval=0.2)
        except TimeoutError:
            left = len(event_ids) - play.extracted(db, event_ids)
            outcomes = self.scrape().total(
                "agent_memory_messages_total", lambda labels: labels["outcome"] == "dead_lettered"
            )
            raise SystemExit(
                f"{left} of {len(event_ids)} turns not extracted in {timeout:.0f} s "
                f"({outcomes:.0f} messages dead-lettered)"
            ) from None


def per_turn(counts: Scrape, turns: int) -> dict[str, float]:
    model, embeddings = usage(counts, is_model), usage(counts, is_embedding)
    by_task = {
        task: usage(counts, lambda labels, t=task: purpose(labels) == t).calls / turns
        for task in ("extract", "consolidate")
    }
    return {
        "calls": model.calls / turns,
        **{f"{task} calls": value for task, value in by_task.items()},
        "input tokens": model.input_tokens / turns,
        "output tokens": model.output_tokens / turns,
        "tokens": model.tokens / turns,
        "embedding calls": embeddings.calls / turns,
        "embedding tokens": embeddings.tokens / turns,
    }


def paced_play(worker: Worker, db: psycopg.Connection, mode: Mode, args, convs) -> dict:
    prefix = f"p{uuid.uuid4().hex[:8]}"
    users = play.agent_users(prefix, convs, args.sessions)
    before = worker.start(mode, None)
    machine = MachineTime()
    started = time.monotonic()
    stack = worker.stack
    assert stack.endpoints is not None and stack.dev_api_key is not None
    recorded = asyncio.run(play.play(stack.endpoints.api_url, stack.dev_api_key, users, args.pace))
    worker.wait_extracted(db, [r.event_id for r in recorded], 180)
    last, windows = worker.stop()
    counts = last - before
    visible = play.visible_after(db, recorded)
    return {
        "turns": len(recorded),
        "sessions": sum(len(chain) for chain in users),
        "seconds": time.monotonic() - started,
        "skipped": counts.total(SKIPPED),
        **per_turn(counts, len(recorded)),
        "visible": visible,
        **play.written(db, prefix),
        "counts": counts,
        "windows": windows,
        "machine": machine.report(),
    }


def drain(
    worker: Worker,
    db: psycopg.Connection,
    publisher: EventPublisher,
    mode: Mode,
    args,
    convs,
    pool: int | None = None,
    concurrency: int = DRAIN_CONCURRENCY,
) -> dict:
    """Queue a backlog with the worker stopped, then time one replica's drain."""
    prefix = f"d{uuid.uuid4().hex[:8]}"
    sessions = range(args.sessions, args.sessions + args.drain_sessions)
    events = play.backlog(prefix, convs, sessions, args.drain_turns)
    publish_all(publisher, events)
    ids = [e.event_id for e in events]
    machine = MachineTime()
    before = worker.start(mode, concurrency, pool)
    cpu, started = worker.cpu(), time.monotonic()
    worker.wait_extracted(db, ids, 300)
    cores = (worker.cpu() - cpu) / (time.monotonic() - started)
    last_scrape, windows = worker.stop()
    counts = last_scrape - before
    first, last = play.drain_window(db, prefix, ids)
    return {
        "turns": len(events),
        "seconds": last - first,
        "rate": len(events) / (last - first),
        "calls": usage(counts, is_model).calls / len(events),
        "counts": counts,
        "windows": windows,
        "worker_cores": cores,
        "machine": machine.report(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=20, help="conversations played at once")
    parser.add_argument("--sessions", type=int, default=2, help="sessions per user, in turn")
    parser.add_argument("--pace", type=float, default=2.0, help="seconds between turns")
    parser.add_argument("--drain-sessions", type=int, default=3, help="per conversation")
    parser.add_argument(
        "--drain-turns",
        type=int,
        default=3 * WINDOW,
        help="per drained session (default: three default windows; sessions hold 19-22)",
    )
    parser.add_argument("--generate-ms", type=float, default=800.0)
    parser.add_argument("--embed-ms", type=float, default=150.0)
    parser.add_argument("--jitter", type=float, default=0.25, help="e.g. 0.25 for +-25%%")
    args = parser.parse_args()
    started, whole = time.monotonic(), MachineTime()
    convs = play.conversations(args.users)
    print(
        f"llm cost: {args.users} users x {args.sessions} sessions played at one turn per "
        f"{args.pace:g} s per session; drains of {args.users * args.drain_sessions} sessions x "
        f"{args.drain_turns} turns; fake Gemini generate {args.generate_ms:.0f} ms, embed "
        f"{args.embed_ms:.0f} ms, +-{args.jitter:.0%}",
        flush=True,
    )
    for mode in MODES:
        print(f"  {mode.name}: {mode.about}")
    results: dict[str, dict] = {}
    pools: dict[int, list[float]] = {4: [], 32: []}
    with bench_stack(services=("api",)) as (stack, endpoints, settings):
        gemini = start_gemini(stack, args)
        publisher = EventPublisher(
            settings.model_copy(update={"pubsub_emulator_host": endpoints.pubsub_emulator_host})
        )
        worker = Worker(stack)
        try:
            with psycopg.connect(endpoints.database_url, autocommit=True) as db:
                # Not measured: the first start of the path (the emulator's JIT, connections).
                drain(worker, db, publisher, MODES[1], args, convs[:4])
                for mode in MODES:
                    played = paced_play(worker, db, mode, args, convs)
                    print(f"  {mode.name}: played in {played['seconds']:.0f} s", flush=True)
                    drained = drain(worker, db, publisher, mode, args, convs)
                    print(f"  {mode.name}: drained at {drained['rate']:.1f} turns/s", flush=True)
                    results[mode.name] = {
                        "play": played,
                        "drain": drained,
                        "transactions": transactions(played["counts"] + drained["counts"]),
                    }
                for size in (4, 32, 4, 32):
                    rate = drain(worker, db, publisher, MODES[1], args, convs, pool=size)["rate"]
                    print(f"  default, pool {size}: {rate:.1f} turns/s", flush=True)
                    pools[size].append(rate)
        finally:
            publisher.stop()
            gemini.stop(5)
    print()
    print("\n".join(report(results, pools, args.generate_ms)))
    print(f"whole run: {time.monotonic() - started:.0f} s; {describe_machine(whole.report())}")
    print(last_line(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
