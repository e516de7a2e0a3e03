"""The summary worker's handler decisions, with a fake buffer: what each turn of
a batch ends as after its append (applied, duplicate, dropped, continued to a
fold, or failed alone). tests/integration/test_batch_handler.py and
test_session_memory.py prove the same against the real Valkey."""

from __future__ import annotations

from services.summary_worker.folding import FoldPolicy
from services.summary_worker.handlers import fold, record_turns
from shared.bus.contract import Continue, Outcome
from shared.session_buffer import AppendResult
from tests.bus_helpers import make_turn

IDS = {"app": "app-1", "user_id": "user-1", "session_id": "sess-1"}
POLICY = FoldPolicy(trigger_turns=10, trigger_tokens=4000, kept_turns=4)


class FakeBuffer:
    """Answers each append with the next scripted result; records what was appended."""

    def __init__(self, results):
        self.results = list(results)
        self.appended = []

    def append_many(self, appends):
        self.appended.append([(key.session_id, turn.turn_id) for key, turn, _prev in appends])
        return self.results[: len(appends)]


class FakeFolder:
    def __init__(self) -> None:
        self.folded = []

    def fold_if_due(self, key, appended) -> None:
        self.folded.append((key.session_id, appended.turn_count))


def test_each_turn_of_a_batch_ends_by_its_own_append_in_one_round_trip():
    turns = [make_turn(IDS, n) for n in range(1, 5)]
    buffer = FakeBuffer(
        [
            AppendResult(added=True, turn_count=3, tokens=90),
            AppendResult(added=False, turn_count=3, tokens=90),
            AppendResult(added=True, turn_count=0, tokens=0, dropped=True),
            AppendResult(added=True, turn_count=12, tokens=400),
        ]
    )
    results = record_turns([(t, None) for t in turns], buffer=buffer, policy=POLICY)
    assert buffer.appended == [[("sess-1", f"turn-000{n}") for n in range(1, 5)]]
    assert results[:3] == [Outcome.APPLIED, Outcome.DUPLICATE, Outcome.DROPPED]
    assert results[3] == Continue(AppendResult(added=True, turn_count=12, tokens=400))


def test_an_append_that_failed_fails_its_turn_alone():
    failure = ConnectionError("valkey went away")
    buffer = FakeBuffer([AppendResult(added=True, turn_count=1, tokens=10), failure])
    turns = [make_turn(IDS, 1), make_turn(IDS, 2)]
    results = record_turns([(t, None) for t in turns], buffer=buffer, policy=POLICY)
    assert results == [Outcome.APPLIED, failure]


def test_a_turn_that_is_not_a_turn_fails_alone_and_the_others_still_go():
    buffer = FakeBuffer([AppendResult(added=True, turn_count=1, tokens=10)])
    results = record_turns(
        [("not a turn", None), (make_turn(IDS, 1), None)], buffer=buffer, policy=POLICY
    )
    assert [type(r).__name__ if isinstance(r, Exception) else r for r in results] == [
        "TypeError",
        Outcome.APPLIED,
    ]
    assert str(results[0]) == "the summary worker takes turns, not str"
    assert buffer.appended == [[("sess-1", "turn-0001")]]


def test_a_fold_is_asked_for_and_the_turn_ends_by_its_append():
    folder = FakeFolder()
    over = AppendResult(added=False, turn_count=12, tokens=400)
    assert fold(make_turn(IDS, 7), None, over, folder=folder) is Outcome.DUPLICATE
    assert folder.folded == [("sess-1", 12)]
