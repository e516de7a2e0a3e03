"""The write discipline (`shared.db.planned_write`) with a fake transaction: a plan
that went stale is made again after a random pause, the attempts are bounded and
their end names what kept changing, and a stale transaction never commits. The
handlers' integration tests prove it on Postgres."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from shared.db.planned_write import Done, StalePlan, write_planned


class Transactions:
    """Opens fake transactions and records how each ended."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    @contextmanager
    def __call__(self):
        try:
            yield self
        except BaseException:
            self.ended.append("rolled back")
            raise
        self.ended.append("committed")


class Plans:
    """Plan n is `n`; a write raises StalePlan for the plans in `stale`."""

    def __init__(self, stale: set[int]) -> None:
        self.stale = stale
        self.made = 0
        self.written: list[int] = []

    def plan(self) -> int:
        self.made += 1
        return self.made

    def write(self, tx: Transactions, plan: int) -> str:
        if plan in self.stale:
            raise StalePlan(f"plan {plan} is stale")
        self.written.append(plan)
        return f"wrote plan {plan}"


def test_a_stale_plan_is_made_again_after_a_jittered_pause_and_then_written():
    transactions, plans, pauses = Transactions(), Plans(stale={1, 2}), []
    result = write_planned(
        transactions, plans.plan, plans.write, attempts=4, what="x", pause_seconds=0.2,
        sleep=pauses.append,
    )  # fmt: skip
    assert result == "wrote plan 3"
    assert plans.written == [3]
    assert transactions.ended == ["rolled back", "rolled back", "committed"]
    # Before the n-th plan again, a pause drawn from [0, n × 0.2 s].
    assert len(pauses) == 2 and 0 <= pauses[0] <= 0.2 and 0 <= pauses[1] <= 0.4


def test_attempts_spent_raise_stale_plan_naming_what_changed_and_the_last_reason():
    transactions, plans = Transactions(), Plans(stale={1, 2, 3})
    with pytest.raises(StalePlan) as raised:
        write_planned(
            transactions, plans.plan, plans.write, attempts=3, what="the window of s1",
            sleep=lambda _s: None,
        )  # fmt: skip
    assert str(raised.value) == (
        "the window of s1 changed under 3 plans in a row (last: plan 3 is stale); retry"
    )
    assert plans.made == 3 and plans.written == []
    assert transactions.ended == ["rolled back"] * 3


def test_a_plan_that_is_done_takes_no_transaction():
    transactions = Transactions()

    def write(tx, plan):  # pragma: no cover - must not run
        raise AssertionError("written")

    assert write_planned(
        transactions, lambda: Done("nothing to do"), write, attempts=3, what="x"
    ) == ("nothing to do")
    assert transactions.ended == []


def test_another_error_of_the_write_rolls_back_and_is_not_retried():
    transactions, made = Transactions(), []

    def write(tx, plan):
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        write_planned(transactions, lambda: made.append(1), write, attempts=3, what="x")
    assert made == [1] and transactions.ended == ["rolled back"]
