"""Chaos suite: faults injected into a running `agent-memory up` while turns are recorded.

Starts `agent-memory up --data-dir <tmp>` as a subprocess (the real processes, in
durable mode, on a free AM_API_PORT), and runs each scenario on users of its own:
a burst of turns recorded through the HTTP API with the stack's development key
(the project's client; a 503 or a connection error is retried with the same
turn_id until the scenario's deadline), with a fault injected mid-burst. Then it
waits, polling with a deadline, until every accepted turn is applied, and checks
Valkey and Postgres directly: each turn exactly once in its session (the buffered
turns plus the turn ids folded into the summary) and exactly once in `episodes`.
The API buffers a turn itself before it answers, so the summary worker's log must
also show each event concluded (a stalled summary worker is otherwise invisible).
The dead-letter queues are read without consuming them.

Scenarios (`--only NAME`, repeatable or comma-separated; `--list` names them):

  summary-kill9, extraction-kill9, compaction-kill9   kill -9 of a worker
  summary-sigterm, extraction-sigterm, compaction-sigterm   SIGTERM of a worker
  valkey-kill9, valkey-sigstop                  Valkey killed; stopped for 20 s
  postgres-kill9, postgres-sigstop              the postmaster killed; its group stopped 20 s
  emulator-kill9                                the Pub/Sub emulator killed
  invalid-events                                invalid events published onto `turns`
  dlq-replay                                    `agent-memory dlq replay turns-summary`
                                                of valid and invalid dead letters
  valkey-full                                   Valkey's maxmemory set below what it holds
                                                (noeviction) for 20 s
  overload                                      turns at twice what the workers drain, through
                                                an API with a small publish queue, the emulator
                                                stopped 4 s: 503 + Retry-After, retried
  postgres-disk-full                            Postgres's file system (a tmpfs) full for 20 s,
                                                its WAL made to need a new segment half-way
  postgres-partition, valkey-partition          every packet to the store dropped (nft) 30 s
  skewed-clocks                                 4 more workers, clocks 5 min ahead and behind
  outage-over-lease                             Valkey stopped 45 s (> ack deadline, leases)
  cpu-saturation                                2 busy loops per core for 30 s

One table row per scenario; the process exits 1 unless every row passes (0 lost,
0 duplicated, 0 valid events dead-lettered, recovered within the deadline, and the
scenario's own checks). The stack is restarted between scenarios when one left
it broken, and always stopped at the end, also on Ctrl-C.

    .venv/bin/python bench/chaos.py [--only NAME] [--keep] [--turns 150] [--rate 50]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.chaos_suite.budgets import SEND_BUDGET, wait_until  # noqa: E402
from bench.chaos_suite.burst import Burst, make_turns  # noqa: E402
from bench.chaos_suite.clocks import run_skewed_clocks  # noqa: E402
from bench.chaos_suite.console import indent, say  # noqa: E402
from bench.chaos_suite.disk import run_disk_full  # noqa: E402
from bench.chaos_suite.faults import Kill, Pause  # noqa: E402
from bench.chaos_suite.invalid import run_invalid_events  # noqa: E402
from bench.chaos_suite.leases import run_long_outage, run_saturation  # noqa: E402
from bench.chaos_suite.network import run_partition  # noqa: E402
from bench.chaos_suite.observe import settle  # noqa: E402
from bench.chaos_suite.outages import run_emulator_kill, run_fault_scenario  # noqa: E402
from bench.chaos_suite.overload import run_overload  # noqa: E402
from bench.chaos_suite.pressure import run_valkey_full  # noqa: E402
from bench.chaos_suite.replay import run_dlq_replay  # noqa: E402
from bench.chaos_suite.report import Row, print_report  # noqa: E402
from bench.chaos_suite.scenario import Context  # noqa: E402
from bench.chaos_suite.stack import Stack, StackError  # noqa: E402
from shared.logging import configure_logging  # noqa: E402

SCENARIOS: dict[str, Callable[[Context, str], Row]] = {
    "summary-kill9": lambda c, n: run_fault_scenario(c, n, Kill("summary", signal.SIGKILL)),
    "extraction-kill9": lambda c, n: run_fault_scenario(c, n, Kill("extraction", signal.SIGKILL)),
    "compaction-kill9": lambda c, n: run_fault_scenario(
        c, n, Kill("compaction", signal.SIGKILL), compaction=True
    ),
    "summary-sigterm": lambda c, n: run_fault_scenario(c, n, Kill("summary", signal.SIGTERM)),
    "extraction-sigterm": lambda c, n: run_fault_scenario(c, n, Kill("extraction", signal.SIGTERM)),
    "compaction-sigterm": lambda c, n: run_fault_scenario(
        c, n, Kill("compaction", signal.SIGTERM), compaction=True
    ),
    "valkey-kill9": lambda c, n: run_fault_scenario(c, n, Kill("valkey", signal.SIGKILL)),
    "valkey-sigstop": lambda c, n: run_fault_scenario(c, n, Pause("valkey")),
    "postgres-kill9": lambda c, n: run_fault_scenario(c, n, Kill("postgres", signal.SIGKILL)),
    "postgres-sigstop": lambda c, n: run_fault_scenario(c, n, Pause("postgres")),
    "emulator-kill9": run_emulator_kill,
    "invalid-events": run_invalid_events,
    "dlq-replay": run_dlq_replay,
    "valkey-full": run_valkey_full,
    "overload": run_overload,
    "postgres-disk-full": run_disk_full,
    "postgres-partition": lambda c, n: run_partition(c, n, "postgres"),
    "valkey-partition": lambda c, n: run_partition(c, n, "valkey"),
    "skewed-clocks": run_skewed_clocks,
    "outage-over-lease": run_long_outage,
    "cpu-saturation": run_saturation,
}


def selected(only: list[str]) -> list[str]:
    if not only:
        return list(SCENARIOS)
    names = [n.strip() for item in only for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)} (see --list)")
    return [n for n in SCENARIOS if n in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="scenario name(s)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--turns", type=int, default=150, help="turns per burst")
    parser.add_argument("--rate", type=float, default=50.0, help="turns per second")
    parser.add_argument("--deadline", type=float, default=1200.0, help="seconds for the run")
    args = parser.parse_args()
    if args.list:
        print("\n".join(SCENARIOS))
        return 0
    names = selected(args.only)
    configure_logging("console", "ERROR")
    # SIGTERM and SIGHUP unwind like Ctrl-C, through the finally that stops the stack.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda s, _f: sys.exit(128 + s))
    root = Path(tempfile.mkdtemp(prefix="agent-memory-chaos-"))
    runner = Runner(root, args, run=uuid.uuid4().hex[:6], started=time.monotonic())
    interrupted = False
    try:
        for name in names:
            runner.scenario(name)
    except StackError as exc:
        say(f"the stack could not be started: {exc}")
        if runner.stack is not None:
            say(indent(runner.stack.log_tails(), "      "))
        return 2
    except KeyboardInterrupt:
        say("interrupted: stopping the stack")
        interrupted = True
    finally:
        runner.close()
        if args.keep:
            say(f"data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    rows = runner.rows
    print_report(rows, time.monotonic() - runner.started)
    if interrupted:
        return 130
    return 0 if rows and all(r.ok for r in rows) else 1


class Runner:
    """Runs the scenarios one after another on one stack, started on first use and
    replaced when a scenario leaves it unfit for the next."""

    def __init__(self, root: Path, args: argparse.Namespace, run: str, started: float) -> None:
        self.root, self.args, self.run, self.started = root, args, run, started
        self.rows: list[Row] = []
        self.stacks = 0
        self.stack: Stack | None = None

    def scenario(self, name: str) -> None:
        args = self.args
        if time.monotonic() >= self.started + args.deadline:
            self.rows.append(Row(name, "-", recovery="skipped", failures=["global deadline"]))
            return
        stack = self.stack or self._new_stack()
        say(f"[{name}]")
        settings = stack.settings
        assert settings is not None
        until = self.started + args.deadline
        ctx = Context(stack, settings.default_app, self.run, args.turns, args.rate, until)
        began = time.monotonic()
        row = SCENARIOS[name](ctx, name)
        self.rows.append(row)
        usable = usable_after(stack, ctx, row)
        say(
            f"    {'PASS' if row.ok else 'FAIL'} in {time.monotonic() - began:.0f} s"
            + ("" if row.ok else ": " + "; ".join(row.failures))
        )
        if not row.recovered:
            say("    log tails of the stack's processes:")
            say(indent(stack.log_tails(), "      "))
        if not usable:
            say("  the stack is not healthy: the next scenario gets a new one")
            self.close()

    def _new_stack(self) -> Stack:
        self.stacks += 1
        self.stack = stack = Stack(self.root, self.stacks)
        say(f"starting agent-memory up (data dir {stack.data_dir})")
        stack.start()
        say(f"  up: API {stack.api_url}, logs in {stack.log_dir}")
        return stack

    def close(self) -> None:
        if self.stack is not None:
            stop_stack(self.stack)
            self.stack = None


def usable_after(stack: Stack, ctx: Context, row: Row) -> bool:
    """Is the stack fit for the next scenario? Every process alive and the API ready,
    and a probe turn carried all the way (buffered, concluded by the summary worker,
    archived) within 30 s: a stalled worker is alive and ready too. A stack that
    fails only the probe counts against the scenario that left it so."""
    # A restarted worker may still be starting; a component that never came back won't.
    if not wait_until(stack.healthy, ctx.until(15 if row.recovered else 0), 0.5):
        return False
    probe = make_turns(ctx.app, ctx.users(f"{row.name}-probe", 1), 1, 1, "probe")
    Burst(stack, probe, rate=10, threads=1).start().join(ctx.until(SEND_BUDGET))
    if probe[0].event_id and settle(stack, ctx.app, probe, ctx.until(30)).at is not None:
        return True
    row.fail("afterwards the stack did not carry a probe turn through within 30 s")
    row.recovered = False
    return False


def stop_stack(stack: Stack) -> None:
    # A second Ctrl-C must not interrupt the stop half-way.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        killed = stack.stop()
    finally:
        signal.signal(signal.SIGINT, previous)
    if killed:
        say(f"  killed what the stack left behind: {', '.join(killed)}")


if __name__ == "__main__":
    sys.exit(main())
