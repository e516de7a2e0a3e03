"""Scaling benchmark: the extraction worker's drain rate with 1, 2 and 4 replicas
against an LLM with a realistic latency.

Starts a local stack (PostgreSQL, Valkey, the Pub/Sub emulator; no API) in a
temporary folder and the fake Gemini endpoint in a process of its own
(bench/slow_gemini.py: generateContent 800 ms, embeddings 150 ms, +-25%; its
model answers as the `offline` provider), and points the workers' `gemini`
LLM and embedding providers at it. Each run queues a fresh backlog (`--turns`
turns of `--users` new users, one session each, published straight to Pub/Sub,
interleaved as users who talk at once) BEFORE it starts the extraction replicas,
then times the drain: turns/s from the first handled message to the last turn
extracted, a turn being extracted when its ledger row exists (acking its
`turns-extraction` message only archives it and puts it in its session's
extraction window; the window's `extraction-requests` message writes its
memories and the ledger rows); the handlers' p50/p99 from the "message handled"
log lines (`duration_ms`), of a turn archived and of a window extracted; and the
CPU seconds of every process over that window. Runs: 1 replica at
`--concurrency` (16), 1 replica at 64, 2 and 4 replicas at `--concurrency`. A
turn costs its archive (one embedding batch, its key's and its neighbours'), and
a window of turns (AM_EXTRACTION_WINDOW_TURNS, 4) one extraction call, one
embedding batch and one consolidation call. Keep `--turns / --users` a multiple
of the window: a session's last window that is not full waits for the idle
sweep (AM_EXTRACTION_WINDOW_SECONDS, 30 s), which the drain would then time.

"slots busy" is Little's law per subscription: the handlers' time over the drain
window / handler slots (each subscription has `--concurrency` per replica), for
the turns archived and the windows extracted; near 100% means every slot was in
a handler, so a gap in the drain rate is time spent inside the handlers (waiting
on a lock, a connection, the model or the CPU), not idle slots.
Below the table, for each run: CPU seconds of every process, turns archived per
replica, "handlers of one user at once" (a turn whose handler started before the
previous turn of its session had finished, in the same replica or another), and
the workers' Postgres backends sampled every 0.2 s: waiting on a lock (the
user's advisory lock) and idle in a transaction.

First it measures the summary worker's drain rate in a stack of its own with
bench/pipeline.py's `backlog_drain` (the `offline` provider, as there).

    .venv/bin/python bench/scaling.py [--turns 2000] [--users 250] [--concurrency 16]
        [--generate-ms 800] [--embed-ms 150] [--jitter 0.25] [--quick] [--offline]
        [--model-bound]

`--model-bound` measures the design rather than this machine's two cores: a slower
model (generate 2,500 ms, embed 100 ms), 4 handler slots per replica and 1,000 turns
of 200 users, so that the cores stay below 60% busy (printed for each run; a run
above it says so); runs 1, 2 and 4 replicas, and no summary drain. Its last line
is `scaling (model-bound): 2 replicas x<ratio>, 4 replicas x<ratio>`, against
targets of x1.8 and x3.2.

`--offline` measures only the extraction worker's own cost: one replica with the
`offline` LLM and `hash` embeddings (no LLM latency), three drains of a fresh
backlog each, and prints `extraction offline: <turns/s> · <turns/s> · <turns/s>`.

The last line is `scaling: 2 replicas x<ratio>, 4 replicas x<ratio>` (drain rate
against the 1-replica run at `--concurrency`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import AppliedLog, bench_stack  # noqa: E402
from bench.drain_watch import DrainWatch, drain_figures  # noqa: E402
from bench.pipeline import backlog_drain, publish_all, warm_up  # noqa: E402
from bench.scaling_report import HEADER, model_bound_verdict, print_details, row  # noqa: E402
from services.dev.localstack.process import ManagedProcess  # noqa: E402
from services.dev.localstack.stack import LocalStack  # noqa: E402
from services.dev.localstack.supervision import replica_name  # noqa: E402
from shared.bus.publisher import EventPublisher  # noqa: E402
from shared.bus.topology import subscriptions_of  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.events import TurnRecorded, derived_event_id  # noqa: E402
from shared.waiting import poll  # noqa: E402

APP = "default"
TOPICS = ("editor", "region", "ui theme", "database", "deadline")
WARM_UP_TURNS = 4  # per user: one whole window of the default size


def backlog(run: str, users: int, turns: int) -> list[TurnRecorded]:
    """Turn k of every user, then turn k+1 of every user...: as users who talk at
    once would queue them (user by user, the drain's tail would be the last users'
    turns one after another). Each turn states a value of one of five topics, in
    turn: a user's first five turns create a memory each, the later ones update
    one."""
    start = datetime.now(UTC) - timedelta(hours=1)
    events = []
    for n in range(turns):
        u, k = n % users, n // users
        user, session, topic = f"{run}-u{u}", f"{run}-s{u}", TOPICS[k % len(TOPICS)]
        events.append(
            TurnRecorded(
                event_id=derived_event_id(APP, user, session, f"t{k}"),
                app=APP,
                user_id=user,
                session_id=session,
                turn_id=f"t{k}",
                created_at=start + timedelta(seconds=k),
                user=f"My {topic} is now option {k}.",
                assistant=f"Noted: your {topic} is option {k}.",
            )
        )
    return events


def drain(
    stack: LocalStack,
    publisher: EventPublisher,
    gemini: ManagedProcess | None,
    replicas: int,
    concurrency: int,
    users: int,
    turns: int,
    seconds_per_event: float,
    started_first: bool = False,
) -> dict:
    """Queue a fresh backlog, start `replicas` extraction workers, time the drain.
    `started_first`: the replicas are started, and every one pulls, before the
    backlog is queued (what a fleet running already sees; on two cores, starting
    four Python processes takes seconds that the drain would otherwise time)."""
    names = [replica_name("extraction", n) for n in range(1, replicas + 1)]
    run = uuid.uuid4().hex[:8]
    events = backlog(run, users, turns)
    watch = DrainWatch(stack, gemini, names, [e.event_id for e in events])
    stack.settings = stack.settings.model_copy(update={"worker_concurrency": concurrency})
    if started_first:
        stack.start_replicas("extraction", replicas)
        poll(lambda: all_pulling(stack, names), 60, "every replica to pull", 0.2)
    publish_all(publisher, events)
    timeout = 120 + 5 * turns * seconds_per_event / (replicas * concurrency)
    assert stack.endpoints is not None
    try:
        with psycopg.connect(stack.endpoints.database_url, autocommit=True) as db:
            stack.start_replicas("extraction", replicas)
            poll(lambda: watch.drained(db), timeout, f"{len(events)} turns extracted", 0.2)
        cpu_after = watch.cpu()
        machine = watch.at_first["machine"].report()
    finally:
        stack.stop_services(names)
    return {
        "replicas": replicas,
        "concurrency": concurrency,
        "events": len(events),
        **drain_figures(watch, replicas * concurrency, cpu_after),
        "written": written(stack, run, users, turns),
        "machine": machine,
    }


def all_pulling(stack: LocalStack, names: list[str]) -> bool:
    """Has each replica logged "worker started" for each of its subscriptions?"""
    for name in names:
        path = stack.log_dir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        if text.count('"worker started"') < EXTRACTION_SUBSCRIPTIONS:
            return False
    return True


EXTRACTION_SUBSCRIPTIONS = len(subscriptions_of("extraction"))


def written(stack: LocalStack, run: str, users: int, turns: int) -> dict[str, int]:
    """What the run left in Postgres: an episode per turn, and live memories."""
    assert stack.endpoints is not None
    pattern = f"{run}-u%"
    with psycopg.connect(stack.endpoints.database_url) as conn:
        episodes, memories = conn.execute(
            "SELECT (SELECT count(*) FROM episodes WHERE app = %s AND user_id LIKE %s), "
            "(SELECT count(*) FROM memories WHERE app = %s AND user_id LIKE %s "
            "AND valid_to IS NULL)",
            (APP, pattern, APP, pattern),
        ).fetchone()
    expected = users * min(len(TOPICS), -(-turns // users))
    if episodes != turns or memories != expected:
        raise SystemExit(
            f"run {run}: {episodes} episodes for {turns} turns, {memories} live memories "
            f"for {expected} expected"
        )
    return {"episodes": episodes, "memories": memories}


def start_gemini(stack: LocalStack, args: argparse.Namespace) -> ManagedProcess:
    """The fake Gemini (bench/slow_gemini.py), listening, and the workers started
    after it pointed at it."""
    argv = [sys.executable, "-m", "bench.slow_gemini", "--generate-ms", str(args.generate_ms)]
    argv += ["--embed-ms", str(args.embed_ms), "--jitter", str(args.jitter)]
    log_path = stack.log_dir / "slow-gemini.log"
    proc = ManagedProcess("gemini (fake)", argv, log_path, cwd=Path(__file__).parents[1])
    proc.start()

    def url() -> str | None:
        if not proc.running:
            raise SystemExit(f"the fake Gemini exited; see {log_path}")
        found = re.search(r"listening on (\S+)", log_path.read_text())
        return found[1] if found else None

    try:
        address = poll(url, 30, "the fake Gemini to listen", interval=0.1)
    except BaseException:
        proc.stop(2)
        raise
    # The workers' environment is this process's (LocalStack.child_environment).
    os.environ.update(
        AM_LLM_PROVIDER="gemini",
        AM_EMBEDDING_PROVIDER="gemini",
        AM_GEMINI_API_KEY="bench-key",
        AM_GEMINI_BASE_URL=address,
    )
    return proc


def summary_drain(burst: int) -> dict:
    """bench/pipeline.py's throughput measurement: one summary worker process."""
    with bench_stack(services=("summary",)) as (stack, endpoints, settings):
        log = AppliedLog(stack.log_dir / "summary.log")
        publisher = EventPublisher(
            settings.model_copy(update={"pubsub_emulator_host": endpoints.pubsub_emulator_host})
        )
        try:
            warm_up(publisher, log)
            return backlog_drain(stack, publisher, log, burst)
        finally:
            publisher.stop()
            # LocalStack exported its emulator; the next stack must start its own.
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)


def offline_runs(args: argparse.Namespace) -> list[dict]:
    """One extraction replica with the offline providers (`offline`, `hash`): what the
    worker's own work costs, with no LLM latency to hide it. Three drains."""
    with bench_stack(services=()) as (stack, endpoints, settings):
        os.environ.update(AM_LLM_PROVIDER="offline", AM_EMBEDDING_PROVIDER="hash")
        publisher = EventPublisher(
            settings.model_copy(update={"pubsub_emulator_host": endpoints.pubsub_emulator_host})
        )
        c = args.concurrency
        try:
            # Not measured: a warm-up of whole windows (a partial one waits for the
            # idle-window check).
            drain(stack, publisher, None, 1, c, c, WARM_UP_TURNS * c, 0.05)
            results = []
            for _ in range(3):
                result = drain(stack, publisher, None, 1, c, args.users, args.turns, 0.05)
                print(row(result), flush=True)
                results.append(result)
            return results
        finally:
            publisher.stop()


# --model-bound: the model's latency, not the CPU, sets the drain rate. A turn
# costs about 70 ms of CPU over every process of the stack, whatever the number
# of replicas: 4 replicas at 1,500 ms a generation drained 19-20 turns/s, 1.3 of
# the 2 cores; at 2,500 ms they need about 0.8.
MODEL_BOUND = {
    "generate_ms": 2500.0,
    "embed_ms": 100.0,
    "concurrency": 4,
    "turns": 1000,
    "users": 200,
}


def extraction_runs(args: argparse.Namespace) -> list[dict]:
    per_event = (2 * args.generate_ms + args.embed_ms) / 1000 + 0.1
    with bench_stack(services=()) as (stack, endpoints, settings):
        gemini = start_gemini(stack, args)
        publisher = EventPublisher(
            settings.model_copy(update={"pubsub_emulator_host": endpoints.pubsub_emulator_host})
        )
        c = args.concurrency
        try:
            # Not measured: the first start of the path (the emulator's JIT, connections).
            drain(stack, publisher, gemini, 1, c, c, WARM_UP_TURNS * c, per_event)
            results = []
            runs = (
                ((1, c), (2, c), (4, c)) if args.model_bound else ((1, c), (1, 64), (2, c), (4, c))
            )
            for replicas, concurrency in runs:
                result = drain(
                    stack,
                    publisher,
                    gemini,
                    replicas,
                    concurrency,
                    args.users,
                    args.turns,
                    per_event,
                    started_first=args.model_bound,
                )
                print(row(result), flush=True)
                results.append(result)
            return results
        finally:
            publisher.stop()
            gemini.stop(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--users", type=int, default=250)
    parser.add_argument("--concurrency", type=int, default=16, help="per replica")
    parser.add_argument("--generate-ms", type=float, default=800.0)
    parser.add_argument("--embed-ms", type=float, default=150.0)
    parser.add_argument("--jitter", type=float, default=0.25, help="e.g. 0.25 for +-25%%")
    parser.add_argument("--summary-burst", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="400 turns of 100 users")
    parser.add_argument(
        "--model-bound",
        action="store_true",
        help="a slower model and 4 slots per replica: cores below 60%% busy; 1, 2, 4 replicas",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="only one extraction replica with the offline LLM and hash embeddings, three drains",
    )
    args = parser.parse_args()
    if args.model_bound:
        vars(args).update(MODEL_BOUND)
    if args.quick:
        args.turns, args.users, args.summary_burst = 400, 100, 2000
    window = load_settings(database_url=None, valkey_url=None).extraction_window_turns
    if args.turns % args.users or (args.turns // args.users) % window:
        print(
            f"note: {args.turns} turns of {args.users} users are not whole windows of {window} "
            "turns: the last window of a session waits for the idle-window check, and the drain "
            "times it"
        )
    if args.offline:
        print(f"extraction, offline providers: {args.turns} turns of {args.users} users\n{HEADER}")
        rates = [r["events_per_second"] for r in offline_runs(args)]
        print(f"extraction offline: {' · '.join(f'{r:.1f}' for r in rates)} turns/s")
        return 0

    if args.model_bound:
        return model_bound(args)
    summary = summary_drain(args.summary_burst)
    print(
        f"summary worker, one process: {summary['applied_per_second']} events/s "
        f"({summary['events']} queued events drained in {summary['drain_seconds']} s; "
        "bench/pipeline.py's backlog_drain)",
        flush=True,
    )
    print(
        f"\nextraction: {args.turns} turns of {args.users} users per run; fake Gemini "
        f"generate {args.generate_ms:.0f} ms, embed {args.embed_ms:.0f} ms, "
        f"+-{args.jitter:.0%}\n{HEADER}",
        flush=True,
    )
    results = extraction_runs(args)
    print_details(results)
    base = results[0]["events_per_second"]
    by_replicas = {r["replicas"]: r["events_per_second"] for r in results[2:]}
    print(
        f"scaling: 2 replicas x{by_replicas[2] / base:.2f}, 4 replicas x{by_replicas[4] / base:.2f}"
    )
    return 0


def model_bound(args: argparse.Namespace) -> int:
    """The extraction drains of --model-bound, their cores busy, and the ratios."""
    cores = os.cpu_count() or 1
    print(
        f"extraction, model-bound: {args.turns} turns of {args.users} users per run; fake "
        f"Gemini generate {args.generate_ms:.0f} ms, embed {args.embed_ms:.0f} ms, "
        f"+-{args.jitter:.0%}; {args.concurrency} slots per replica; {cores} cores\n{HEADER}",
        flush=True,
    )
    return model_bound_verdict(extraction_runs(args))


if __name__ == "__main__":
    raise SystemExit(main())
