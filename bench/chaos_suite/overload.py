"""Overload: turns at twice what the workers drain, for a bounded time, through an
API of the row's own whose publish queue is small (AM_PUBLISH_QUEUE_LIMIT below
the burst's senders), with the Pub/Sub emulator stopped for a few seconds mid-burst
so that publishes wait and the queue fills for real. The API must refuse what does
not fit with 503 `overloaded` and `Retry-After` (the client waits that long, then
sends the turn again), answer within its publish timeout, keep its memory, and the
backlog must grow and then drain with nothing lost or doubled."""

from __future__ import annotations

import statistics
import threading
import time

import psutil

from bench.chaos_suite.answers import AnswerLog, p99
from bench.chaos_suite.budgets import APPLY_BUDGET, wait_until
from bench.chaos_suite.burst import Burst, make_turns
from bench.chaos_suite.console import say
from bench.chaos_suite.faults import Pause
from bench.chaos_suite.observe import settle
from bench.chaos_suite.own_api import OwnApi
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context, finish, inject
from bench.chaos_suite.stack import Stack
from shared.bus.overview import read_overview

# How much faster than the workers drain the burst must be, and how long.
OVERLOAD_FACTOR = 2.0
OVERLOAD_SECONDS = 20.0
SENDERS = 24  # the burst's concurrent clients
# Below SENDERS, or the senders could never have more turns waiting than it holds.
QUEUE_LIMIT = 8
# Well inside the API's publish timeout (10 s): publishes wait, none times out.
EMULATOR_STOP_SECONDS = 4.0
SAMPLE_SECONDS = 1.0
SUBSCRIPTIONS = ("turns-summary", "turns-extraction")
# A refusal does not wait for Pub/Sub: one that did would last into the emulator's
# stop, seconds. Half the stop leaves room for a loaded 2-core machine, where a
# request waits its turn on the API's event loop (1.2 s seen at a load of 25).
REFUSAL_P99_BOUND = EMULATOR_STOP_SECONDS / 2
API_RSS_BOUND = 200 * 2**20


class Sampler:
    """The console's figures (backlog, oldest unsettled age, events per second of
    each subscription) and an API process's resident memory, every SAMPLE_SECONDS."""

    def __init__(self, stack: Stack, api_pid: int) -> None:
        self.stack, self.api_pid = stack, api_pid
        self.samples: list[tuple[float, dict[str, tuple[int, float | None, float]], int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        settings = self.stack.settings
        assert settings is not None
        while True:
            try:
                overview = read_overview(self.stack.valkey, settings)
                rss = psutil.Process(self.api_pid).memory_info().rss
            except Exception:  # noqa: S110 - a figure missed is a gap in the samples
                pass
            else:
                figures = {
                    s.subscription: (s.backlog, s.oldest_unacked_seconds, s.events_per_second)
                    for s in overview.subscriptions
                }
                self.samples.append((time.monotonic(), figures, rss))
            if self._stop.wait(SAMPLE_SECONDS):
                return

    def backlog(self, subscription: str, index: int) -> int:
        return self.samples[index][1].get(subscription, (0, None, 0.0))[0] if self.samples else 0

    def peak(self, subscription: str) -> tuple[int, float]:
        backlogs = [f[subscription][0] for _t, f, _r in self.samples if subscription in f]
        ages = [f[subscription][1] or 0.0 for _t, f, _r in self.samples if subscription in f]
        return max(backlogs, default=0), max(ages, default=0.0)

    def drain_rate(self, subscription: str, after: float, baseline: int) -> float:
        """The median events per second settled while a backlog (above `baseline`,
        what earlier scenarios left: messages lost with a killed emulator) waited."""
        rates = [
            f[subscription][2]
            for t, f, _r in self.samples
            if t >= after and subscription in f and f[subscription][0] > baseline
        ]
        return statistics.median(rates) if rates else 0.0

    def rss(self) -> tuple[int, int]:
        """The API's resident memory at the first sample, and its peak."""
        values = [r for _t, _f, r in self.samples]
        return (values[0], max(values)) if values else (0, 0)


def run_overload(ctx: Context, name: str) -> Row:
    row = Row(
        name,
        f"{OVERLOAD_FACTOR:g}x drain {OVERLOAD_SECONDS:.0f}s, queue limit {QUEUE_LIMIT},"
        f" emulator stopped {EMULATOR_STOP_SECONDS:.0f}s",
    )
    api = OwnApi(ctx.stack, "api-overload", {"AM_PUBLISH_QUEUE_LIMIT": str(QUEUE_LIMIT)})
    why = api.start(ctx.until(60))
    if why:
        api.stop()
        row.recovery = "not run"
        row.fail(f"cannot make the fault: {why}")
        return row
    answers = AnswerLog()
    try:
        _overload(ctx, row, api, answers)
    finally:
        api.stop()
        answers.shutdown()
    return row


def _overload(ctx: Context, row: Row, api: OwnApi, answers: AnswerLog) -> None:
    stack = ctx.stack
    rate = ctx.rate * 4  # more than the senders manage: as fast as they can
    turns = make_turns(ctx.app, ctx.users(row.name, 12), 4, int(rate * OVERLOAD_SECONDS), "t")
    for turn in turns:  # a turn of a real conversation: its extraction costs more than its record
        turn.text += LONG_TURN
    ctx.last_turns = turns
    sampler = Sampler(stack, api.pid).start()
    wait_until(lambda: sampler.samples, ctx.until(10), 0.1)
    before = {sub: sampler.backlog(sub, 0) for sub in SUBSCRIPTIONS}
    client = answers.client_factory(api.url, stack.api_key)
    burst = Burst(
        stack, turns, rate, threads=SENDERS, client=client, seconds=OVERLOAD_SECONDS
    ).start()
    time.sleep(OVERLOAD_SECONDS / 3)
    fault = Pause("pubsub-emulator", EMULATOR_STOP_SECONDS)
    _at, ended_at = inject(ctx, row, fault, burst, f"{burst.sent} sent")
    if ended_at is None:
        sampler.stop()
        return
    sent_for = time.monotonic() - burst.started
    sent = [t for t in turns if t.attempts]
    accepted = [t for t in turns if t.event_id]
    settled = settle(stack, ctx.app, accepted, ctx.until(APPLY_BUDGET * 2))
    # The figures lag the stores by a sample or two.
    drained = wait_until(
        lambda: all(sampler.backlog(s, -1) <= before[s] for s in SUBSCRIPTIONS), ctx.until(30), 0.5
    )
    sampler.stop()
    finish(row, settled, ended_at, turns, stack)
    say(f"    sent {len(sent)} in {sent_for:.1f}s ({len(sent) / sent_for:.0f}/s)")
    _check_refusals(row, answers)
    _check_backlog(row, sampler, before, drained, burst.started, len(accepted) / sent_for)
    _check_api(row, answers, sampler, stack)


def _check_refusals(row: Row, answers: AnswerLog) -> None:
    refusals = answers.refusals()
    overloaded = sum(n for what, n in refusals.items() if what.startswith("503 overloaded"))
    shown = ", ".join(f"{n}x {what}" for what, n in refusals.most_common()) or "none"
    row.notes.append(f"{len(answers.answers)} API answers; refusals: {shown}")
    say(f"    503 overloaded answers: {overloaded} ({shown})")
    if not overloaded:
        row.fail("no 503 overloaded: the API's publish queue never filled")
    if any(what.startswith("503") and "retry-after" not in what for what in refusals):
        row.fail("a 503 without Retry-After")
    early = answers.early_retries()
    row.notes.append(f"turns sent again before their Retry-After: {early}")
    if early:
        row.fail(f"{early} turns sent again before their Retry-After")


def _check_backlog(
    row: Row, sampler: Sampler, before: dict[str, int], drained: bool, began: float, offered: float
) -> None:
    worst, worst_rate = "", float("inf")
    for sub in SUBSCRIPTIONS:
        backlog, age = sampler.peak(sub)
        rate = sampler.drain_rate(sub, began, before[sub])
        note = (
            f"{sub}: backlog {before[sub]} -> peak {backlog} (oldest {age:.0f}s)"
            f" -> {sampler.backlog(sub, -1)}, drained {rate:.1f}/s"
        )
        row.notes.append(note)
        say(f"    {note}")
        if rate and rate < worst_rate:
            worst, worst_rate = sub, rate
    # The slowest subscription's backlog grows; a faster one may keep up.
    if all(sampler.peak(sub)[0] <= before[sub] for sub in SUBSCRIPTIONS):
        row.fail("no subscription's backlog grew")
    if not drained:
        row.fail("the backlog did not drain back to where it was")
    if not worst:
        row.fail("no drain rate in the figures: not overloaded")
        return
    row.notes.append(f"offered {offered:.0f}/s = x{offered / worst_rate:.1f} of {worst}")
    if offered / worst_rate < OVERLOAD_FACTOR:
        row.fail(f"not overloaded: x{offered / worst_rate:.1f} of the drain rate")


def _check_api(row: Row, answers: AnswerLog, sampler: Sampler, stack: Stack) -> None:
    """Every answer within the API's publish timeout (what a turn waits for Pub/Sub
    at most) plus a second, a refusal at once, and the API's memory bounded."""
    assert stack.settings is not None
    bound = stack.settings.publish_timeout_seconds + 1.0
    row.notes.append(f"API answers accepting a turn: {answers.latencies(accepted=True)}")
    row.notes.append(f"API answers refusing one: {answers.latencies(accepted=False)}")
    say(f"    API accepted: {answers.latencies(accepted=True)}")
    say(f"    API refused: {answers.latencies(accepted=False)}")
    if answers.slowest() > bound:
        row.fail(f"an API answer took {answers.slowest():.1f}s, over {bound:.0f}s")
    refused = p99(answers.seconds(accepted=False))
    if refused > REFUSAL_P99_BOUND:
        row.fail(f"refusals p99 {refused:.2f}s, over {REFUSAL_P99_BOUND:g}s")
    first, peak = sampler.rss()
    note = f"API memory {first / 2**20:.0f} MiB -> peak {peak / 2**20:.0f} MiB"
    row.notes.append(note)
    say(f"    {note}")
    if peak - first > API_RSS_BOUND:
        row.fail(f"API memory grew {(peak - first) / 2**20:.0f} MiB")


LONG_TURN = (
    " I moved to Lisbon last spring and work as a data engineer at a logistics firm;"
    " my manager is Ana, we ship the routing service on Fridays, I prefer Python over"
    " Go for tooling, my daughter starts school in September, and I am allergic to"
    " peanuts, so please keep that in mind when you suggest restaurants near Alfama."
) * 2
