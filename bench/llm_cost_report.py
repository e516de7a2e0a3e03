"""What bench/llm_cost.py prints from its results: both modes side by side, the
pool comparison, the targets' verdicts, and its last line."""

from __future__ import annotations

import statistics

from bench.common import percentile
from bench.llm_cost_metrics import Scrape, buckets, histogram_quantile

DRAIN_CONCURRENCY = 32
TARGETS = {"calls": 0.3, "tokens": 0.4, "p99_ms": 100.0, "pool": 0.9}


def transactions(counts: Scrape) -> dict[str, float | None]:
    """The worker's transactions in `counts`: how many, their p99 in ms
    (histogram_quantile's interpolation), and how many took over 100 ms."""
    cumulative = buckets(counts)
    if not cumulative:
        return {"count": 0, "p99_ms": None, "over_100_ms": 0}
    p99 = histogram_quantile(0.99, cumulative)
    within = next((n for bound, n in cumulative if bound == 0.1), None)
    total = cumulative[-1][1]
    return {
        "count": total,
        "p99_ms": None if p99 is None else p99 * 1000,
        "over_100_ms": None if within is None else total - within,
    }


def ratio(new: float, old: float) -> float:
    return new / old if old else float("nan")


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(results: dict[str, dict]) -> list[str]:
    w1, d = results["window 1"], results["default"]
    both = (w1, d)
    rows: list[tuple[str, str, str, str]] = []

    def add(label: str, key: str, fmt: str = "{:.3f}", source: str = "play") -> None:
        a, b = w1[source][key], d[source][key]
        rows.append((label, fmt.format(a), fmt.format(b), f"x{ratio(b, a):.2f}" if a else ""))

    def line(label: str, cells: list[str]) -> None:
        rows.append((label, cells[0], cells[1], ""))

    line(
        "turns played (sessions)", [f"{r['play']['turns']} ({r['play']['sessions']})" for r in both]
    )
    add("turns the filter skipped", "skipped", "{:.0f}")
    add("model calls / turn (extract + consolidate)", "calls")
    add("  extract calls / turn", "extract calls")
    add("  consolidate calls / turn", "consolidate calls")
    add("prompt tokens / turn", "input tokens", "{:.1f}")
    add("output tokens / turn", "output tokens", "{:.1f}")
    add("model tokens / turn (prompt + output)", "tokens", "{:.1f}")
    add("embedding calls / turn (apart)", "embedding calls")
    add("embedding tokens / turn (apart)", "embedding tokens", "{:.1f}")
    for q in (50, 95):
        line(
            f"202 -> memory visible p{q} (s)",
            [f"{percentile(r['play']['visible'], q):.2f}" for r in both],
        )
    line("turns that produced a memory", [str(len(r["play"]["visible"])) for r in both])
    add("live memories", "live memories", "{:.0f}")
    add("revisions written", "revisions", "{:.0f}")
    add(f"drain turns/s (1 replica, concurrency {DRAIN_CONCURRENCY})", "rate", "{:.1f}", "drain")
    line(
        "  drain turns (s)", [f"{r['drain']['turns']} ({r['drain']['seconds']:.1f})" for r in both]
    )
    add("  drain model calls / turn", "calls", "{:.3f}", "drain")
    add("  drain: the worker process's CPU (cores)", "worker_cores", "{:.2f}", "drain")
    for phase in ("play", "drain"):
        sizes = [r[phase]["windows"] for r in both]
        line(f"windows extracted, {phase} (of 1 turn)", [f"{len(z)} ({z.count(1)})" for z in sizes])
    p99s = [r["transactions"]["p99_ms"] for r in both]
    rows.append(
        (
            "transaction p99, play + drain (ms)",
            ms(p99s[0]),
            ms(p99s[1]),
            f"x{ratio(p99s[1], p99s[0]):.2f}" if p99s[0] and p99s[1] else "",
        )
    )
    for phase in ("play", "drain"):
        found = [transactions(r[phase]["counts"]) for r in both]
        line(
            f"  {phase}: p99 ms (> 100 ms of all)",
            [f"{ms(t['p99_ms'])} ({t['over_100_ms']:.0f} of {t['count']:.0f})" for t in found],
        )
    for phase in ("play", "drain"):
        machines = [r[phase]["machine"] for r in both]
        line(
            f"machine, {phase}: stolen / idle %",
            [f"{m.get('steal_percent')} / {m.get('idle_percent')}" for m in machines],
        )
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':<{width}}  {'window 1':>18}  {'default':>18}  {'default/w1':>10}"]
    lines += [f"{a:<{width}}  {b:>18}  {c:>18}  {e:>10}" for a, b, c, e in rows]
    return lines


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(
    results: dict[str, dict], pools: dict[int, list[float]], generate_ms: float
) -> list[str]:
    """The table, the pool comparison and the targets' verdicts."""
    w1, d = results["window 1"], results["default"]
    calls = ratio(d["play"]["calls"], w1["play"]["calls"])
    tokens = ratio(d["play"]["tokens"], w1["play"]["tokens"])
    pool4, pool32 = statistics.mean(pools[4]), statistics.mean(pools[32])
    p99 = d["transactions"]["p99_ms"]
    return [
        *table(results),
        "",
        f"pool comparison (default mode, 1 replica at concurrency {DRAIN_CONCURRENCY}, "
        f"interleaved): AM_DB_POOL_SIZE=4 {' · '.join(f'{r:.1f}' for r in pools[4])} turns/s, "
        f"=32 {' · '.join(f'{r:.1f}' for r in pools[32])} turns/s; means {pool4:.1f} against "
        f"{pool32:.1f}: x{pool4 / pool32:.2f}",
        "transaction p99: from agent_memory_db_transaction_seconds, interpolated within its "
        "bucket as Prometheus's histogram_quantile does",
        "",
        f"{verdict(calls <= TARGETS['calls'])} calls/turn x{calls:.2f} (target <= x0.3)",
        f"{verdict(tokens <= TARGETS['tokens'])} tokens/turn x{tokens:.2f} (target <= x0.4)",
        f"{verdict(p99 is not None and p99 <= TARGETS['p99_ms'])} transaction p99 {ms(p99)} ms "
        f"with the {generate_ms:.0f} ms model (target <= 100 ms)",
        f"{verdict(pool4 / pool32 >= TARGETS['pool'])} pool 4 drains at x{pool4 / pool32:.2f} "
        "of pool 32 (target >= x0.9)",
    ]


def last_line(results: dict[str, dict]) -> str:
    w1, d = results["window 1"], results["default"]
    calls = ratio(d["play"]["calls"], w1["play"]["calls"])
    tokens = ratio(d["play"]["tokens"], w1["play"]["tokens"])
    p99 = f"transaction p99 {ms(d['transactions']['p99_ms'])} ms"
    return f"llm cost: calls/turn x{calls:.2f}, tokens/turn x{tokens:.2f}, {p99}"
