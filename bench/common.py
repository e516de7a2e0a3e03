"""Helpers shared by the benchmarks."""

from __future__ import annotations

import psutil

from shared.localstack.stack import LocalStack


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile `p` (0-100) of `values`."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def cpu_seconds(stack: LocalStack) -> dict[str, float]:
    """CPU time used so far by each process of the stack, and by this benchmark."""
    found = {"bench (this process)": sum(psutil.Process().cpu_times()[:2])}
    for proc in [*stack.components, *stack.service_procs.values()]:
        try:
            group = [psutil.Process(pid) for pid in proc.group_pids()]
            found[proc.name] = sum(sum(p.cpu_times()[:2]) for p in group)
        except psutil.Error:
            continue
    return found
