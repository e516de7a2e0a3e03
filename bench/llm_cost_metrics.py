"""Pure helpers of bench/llm_cost.py: a process's Prometheus exposition read into
a `Scrape`, two scrapes subtracted, the model's calls and tokens summed by
purpose, and a histogram's quantile interpolated as Prometheus's
`histogram_quantile` does."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

CALLS = "agent_memory_llm_calls_total"
TOKENS = "agent_memory_llm_tokens_total"
TRANSACTIONS = "agent_memory_db_transaction_seconds_bucket"
SKIPPED = "agent_memory_extraction_skipped_total"
# The extraction worker's own model tasks: what a window of turns costs.
MODEL_PURPOSES = ("extract", "consolidate")
# Each HTTP attempt is one of these; `rate_limited` marks a wait or a 429 that is
# counted again under one of them, so it is left out of the sum.
ATTEMPTS = ("ok", "retried", "failed")

Labels = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Scrape:
    """Every sample of one scrape: (sample name, its labels) -> value."""

    values: dict[tuple[str, Labels], float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Scrape:
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return cls(values)

    def __sub__(self, before: Scrape) -> Scrape:
        """What was counted between `before` and this scrape, of the same process."""
        return Scrape(
            {key: value - before.values.get(key, 0.0) for key, value in self.values.items()}
        )

    def __add__(self, other: Scrape) -> Scrape:
        """Two processes' counts (or two stretches of one) together."""
        keys = set(self.values) | set(other.values)
        return Scrape({k: self.values.get(k, 0.0) + other.values.get(k, 0.0) for k in keys})

    def total(self, name: str, where: Callable[[dict[str, str]], bool] = lambda _: True) -> float:
        """The sum of the samples called `name` whose labels satisfy `where`,
        over every other label (the counters may carry more labels than asked for)."""
        return sum(
            value
            for (sample, labels), value in self.values.items()
            if sample == name and where(dict(labels))
        )


def purpose(labels: dict[str, str]) -> str:
    """The task a model call was for (`purpose`; `task` in older metrics)."""
    return labels.get("purpose") or labels.get("task", "")


def is_embedding(labels: dict[str, str]) -> bool:
    return "embed" in purpose(labels)


def is_model(labels: dict[str, str]) -> bool:
    return purpose(labels) in MODEL_PURPOSES


@dataclass(frozen=True)
class Usage:
    calls: float
    input_tokens: float
    output_tokens: float

    @property
    def tokens(self) -> float:
        return self.input_tokens + self.output_tokens


def usage(scrape: Scrape, of: Callable[[dict[str, str]], bool]) -> Usage:
    """The calls (HTTP attempts) and tokens of the purposes `of` selects."""
    return Usage(
        scrape.total(CALLS, lambda labels: of(labels) and labels.get("result") in ATTEMPTS),
        scrape.total(TOKENS, lambda labels: of(labels) and labels.get("direction") == "input"),
        scrape.total(TOKENS, lambda labels: of(labels) and labels.get("direction") == "output"),
    )


def buckets(scrape: Scrape, name: str = TRANSACTIONS) -> list[tuple[float, float]]:
    """A histogram's cumulative buckets (upper bound, count), summed over every
    label but `le`, in order of their bounds."""
    found: dict[float, float] = {}
    for (sample, labels), value in scrape.values.items():
        if sample == name:
            bound = float(dict(labels)["le"])
            found[bound] = found.get(bound, 0.0) + value
    return sorted(found.items())


def histogram_quantile(q: float, cumulative: Iterable[tuple[float, float]]) -> float | None:
    """The `q` quantile (0-1) of a histogram, as Prometheus's histogram_quantile
    computes it: the bucket that holds the rank `q` x count, and within it a linear
    interpolation between its lower bound (the previous bucket's upper bound, or 0
    for the first) and its upper bound; in the +Inf bucket, the highest finite
    bound. None with no observations."""
    ordered = sorted(cumulative)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]) or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    previous_bound, previous_count = 0.0, 0.0
    for index, (bound, count) in enumerate(ordered):
        if count >= rank:
            if math.isinf(bound):
                return ordered[index - 1][0]
            if index == 0 and bound <= 0:
                return bound
            inside = count - previous_count
            if inside <= 0:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / inside
        previous_bound, previous_count = bound, count
    return ordered[-2][0]
