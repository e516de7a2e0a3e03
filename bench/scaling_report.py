"""What bench/scaling.py prints: the table's rows, each run's details, and the
verdict of `--model-bound`."""

from __future__ import annotations

import os

MODEL_BOUND_CORES = 0.6  # at most this share of the machine's cores busy
MODEL_BOUND_TARGETS = {2: 1.8, 4: 3.2}


HEADER = (
    f"{'replicas':>8} {'conc':>5} {'turns':>6} {'drain s':>8} {'turns/s':>8} "
    f"{'mid-80% t/s':>11} {'turn p50/p99 ms':>15} {'window p50/p99 ms':>17} "
    f"{'slots busy t/w':>14} {'cores busy':>10} {'retried':>7}"
)


def row(r: dict) -> str:
    turn = f"{r['p50_ms']}/{r['p99_ms']}"
    window = f"{r['window_p50_ms']}/{r['window_p99_ms']}"
    busy = f"{r['slots_busy']:.0%}/{r['window_slots_busy']:.0%}"
    return (
        f"{r['replicas']:>8} {r['concurrency']:>5} {r['events']:>6} {r['drain_seconds']:>8} "
        f"{r['events_per_second']:>8} {r['middle_per_second']:>11} {turn:>15} {window:>17} "
        f"{busy:>14} {r['cores_busy']:>10.2f} {r['retried']:>7}"
    )


def print_details(results: list[dict]) -> None:
    print(
        "\nCPU seconds over each drain window (first handled message to last turn extracted), "
        "and more:"
    )
    for r in results:
        cpu = ", ".join(f"{k} {v}" for k, v in r["cpu_seconds"].items())
        machine = r["machine"]
        print(
            f"  {r['replicas']} x {r['concurrency']}: {cpu}; machine "
            f"{machine.get('idle_percent')}% idle, {machine.get('steal_percent')}% stolen\n"
            f"    turns archived per replica {r['per_replica']}, windows extracted "
            f"{r['windows']}, each replica's first message after "
            f"{r['first_event_after_s']} s; handlers of one user at once: "
            f"{r['same_user_overlaps']}; backends waiting on a lock: mean "
            f"{r['lock_waiters_mean']}, max {r['lock_waiters_max']}; idle in transaction: "
            f"mean {r['idle_in_transaction_mean']}; "
            f"written {r['written']}; messages redelivered (attempt > 1): {r['redelivered']}"
        )


def model_bound_verdict(results: list[dict]) -> int:
    """Print each run's cores busy and the ratios; 0 when the targets are met with
    the cores below MODEL_BOUND_CORES in every run."""
    cores = os.cpu_count() or 1
    print_details(results)
    bound = True
    for r in results:
        share = r["cores_busy"] / cores
        within = share < MODEL_BOUND_CORES
        bound = bound and within
        print(
            f"  {r['replicas']} replica(s): cores {share:.0%} busy "
            f"({'below' if within else 'NOT below'} {MODEL_BOUND_CORES:.0%}); "
            f"retried {r['retried']}, redelivered {r['redelivered']}"
        )
        for example in r["redelivered_examples"]:
            print(f"    came back: {example}")
    base = results[0]["events_per_second"]
    ratios = {r["replicas"]: r["events_per_second"] / base for r in results[1:]}
    met = all(ratios[n] >= target for n, target in MODEL_BOUND_TARGETS.items())
    print(
        f"scaling (model-bound): 2 replicas x{ratios[2]:.2f}, 4 replicas x{ratios[4]:.2f} "
        f"(targets x{MODEL_BOUND_TARGETS[2]} and x{MODEL_BOUND_TARGETS[4]}: "
        f"{'met' if met else 'NOT met'}; cores {'below' if bound else 'NOT below'} "
        f"{MODEL_BOUND_CORES:.0%} in every run)"
    )
    return 0 if met and bound else 1
