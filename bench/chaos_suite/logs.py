"""What the workers' logs say during a scenario: delivery attempts spent on its
events, and the lines about a dependency going down and coming back."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator

from bench.chaos_suite.stack import Stack

# The processes whose logs are not a worker's.
NOT_WORKERS = ("api", "postgres", "valkey", "pubsub-emulator")


def worker_records(stack: Stack, since: dict[str, int]) -> Iterator[dict]:
    """Every JSON record the workers logged after `since` (Stack.log_offsets)."""
    for path in sorted(stack.log_dir.glob("*.log")):
        if path.stem.startswith(NOT_WORKERS):
            continue
        with open(path, "rb") as f:
            f.seek(since.get(path.name, 0))
            chunk = f.read()
        for line in chunk.splitlines():
            if line.startswith(b"{"):
                try:
                    yield json.loads(line)
                except ValueError:
                    continue


def spent_attempts(stack: Stack, event_ids: Iterable[str], since: dict[str, int]) -> list[str]:
    """ "subscription event_id attempt N outcome" for each message of these events
    that was retried, dead-lettered or delivered more than once."""
    wanted = set(event_ids)
    spent = []
    for record in worker_records(stack, since):
        if record.get("message") != "message handled" or record.get("event_id") not in wanted:
            continue
        attempt = int(record.get("delivery_attempt") or 1)
        if attempt > 1 or record.get("outcome") in ("retried", "dead_lettered"):
            spent.append(
                f"{record.get('subscription')} {record['event_id'][:8]} "
                f"attempt {attempt} {record.get('outcome')}"
            )
    return spent


def dependency_lines(stack: Stack, dependency: str, since: dict[str, int]) -> Counter[str]:
    """How many times the workers logged each line about `dependency`'s state."""
    found: Counter[str] = Counter()
    for record in worker_records(stack, since):
        said = str(record.get("message", ""))
        if record.get("dependency") == dependency and said.startswith("dependency"):
            found[said.split(";")[0]] += 1
    return found
