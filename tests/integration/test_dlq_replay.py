"""`agent-memory dlq replay`: bounded to what was there, targeted, selectable, interruptible."""

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY

from shared.bus.attributes import COUNTED, REPLAYED_FOR
from shared.bus.contract import Outcome
from shared.bus.dlq import REPLAY_RUN, DeadLetterQueues
from shared.errors import PermanentError
from shared.events import TurnRecorded
from tests.bus_helpers import Recorder, make_turn, running
from tests.dlq_helpers import dead_letter, pull_all
from tests.support import REPO, run_cli, settings_env, stays, wait_for

_ORIGINAL = {"event_id", "event_type", "schema_version", "app"}


def _skipped(subscription: str) -> float:
    labels = {"subscription": subscription, "outcome": "skipped"}
    return REGISTRY.get_sample_value("agent_memory_messages_total", labels) or 0.0


def test_a_replay_reaches_only_the_subscription_that_dead_lettered_it(
    settings, topology, publisher, ids
):
    turn = make_turn(ids, 1)
    dead_letter(publisher, "turns-summary", [turn])
    summary, extraction = Recorder(), Recorder()
    queues = DeadLetterQueues(settings)

    def applied(event, delivery):
        return Outcome.APPLIED

    before = _skipped("turns-extraction")
    with (
        running(settings, "turns-summary", {TurnRecorded: summary.wrap(applied)}, publisher),
        running(settings, "turns-extraction", {TurnRecorded: extraction.wrap(applied)}, publisher),
    ):
        replay = run_cli(settings, "dlq", "replay", "turns-summary")
        assert replay.returncode == 0, replay.stderr
        assert replay.stdout.splitlines()[-1] == "replayed 1, skipped 0, failed 0"
        wait_for(lambda: summary.count() == 1, 30, "the summary subscription's delivery")
        wait_for(lambda: _skipped("turns-extraction") == before + 1, 30, "extraction's skip")
        stays(
            lambda: (
                summary.count() == 1
                and extraction.count() == 0
                and queues.peek("turns-extraction") == []
            ),
            3,
            "one delivery to summary, none handled by extraction, nothing dead-lettered",
        )
    assert summary.outcomes("turn-0001") == ["applied"]
    assert summary.deliveries[0].attributes[REPLAYED_FOR] == "turns-summary"
    assert extraction.count() == 0
    assert queues.peek("turns-summary") == []
    assert queues.peek("turns-extraction") == []


def test_letters_that_fail_again_go_back_once_and_the_run_ends(settings, topology, publisher, ids):
    turns = [make_turn(ids, n) for n in range(1, 151)]
    dead_letter(publisher, "turns-summary", turns)
    recorder = Recorder()
    queues = DeadLetterQueues(settings)

    def still_broken(event, delivery):
        raise PermanentError("still broken")

    def back(expected_calls):
        # Each handled once more and dead-lettered again: all of them wait again.
        return wait_for(
            lambda: (
                recorder.count() == expected_calls
                and len(found := queues.peek("turns-summary")) == len(turns)
                and found
            ),
            60,
            f"{len(turns)} dead letters back after {expected_calls} deliveries",
            interval=0.2,
        )

    table = {TurnRecorded: recorder.wrap(still_broken)}
    with running(settings, "turns-summary", table, publisher):
        first = run_cli(settings, "dlq", "replay", "turns-summary", timeout=60)
        assert first.returncode == 0, first.stderr
        assert first.stdout.splitlines()[-1] == "replayed 150, skipped 0, failed 0"
        after_first = back(150)
        second = run_cli(settings, "dlq", "replay", "turns-summary", timeout=60)
        assert second.stdout.splitlines()[-1] == "replayed 150, skipped 0, failed 0"
        after_second = back(300)
        stays(lambda: recorder.count() == 300, 2, "no further delivery")

    expected = sorted(t.event_id for t in turns)
    for letters in (after_first, after_second):
        assert sorted(letter.event_id for letter in letters) == expected
        assert {letter.reason for letter in letters} == {"still broken"}
    assert sorted(label for (label, _a, _o) in recorder.calls) == sorted(
        [t.turn_id for t in turns] * 2
    )
    # Each run tags what it publishes with its own id. A letter replayed a second
    # time carries its original attributes, one replayed_for and the second run's id,
    # and none of its dead-lettering.
    runs = []
    for deliveries in (recorder.deliveries[:150], recorder.deliveries[150:]):
        assert {d.attributes[REPLAYED_FOR] for d in deliveries} == {"turns-summary"}
        assert {k for d in deliveries for k in d.attributes if not k.startswith("goog")} == {
            *_ORIGINAL,
            REPLAYED_FOR,
            REPLAY_RUN,
            COUNTED,  # `dlq replay` reports what it publishes to the figures
        }
        (run,) = {d.attributes[REPLAY_RUN] for d in deliveries}
        runs.append(run)
    assert runs[0] != runs[1]


def test_replay_by_event_id_needs_every_id_present(settings, topology, publisher, ids):
    turns = [make_turn(ids, n) for n in (1, 2, 3)]
    dead_letter(publisher, "turns-extraction", turns)
    queues = DeadLetterQueues(settings)
    dead = f"{settings.topic_prefix}turns-extraction-dlq"

    missing = run_cli(
        settings, "dlq", "replay", "turns-extraction",
        "--event-id", turns[0].event_id, "--event-id", "no-such-event",
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr == (
        f"agent-memory: event id no-such-event is not in {dead}; nothing was changed\n"
    )
    assert missing.stdout == ""
    assert len(queues.peek("turns-extraction")) == 3

    chosen = run_cli(
        settings, "dlq", "replay", "turns-extraction",
        "--event-id", turns[0].event_id, "--event-id", turns[2].event_id,
    )  # fmt: skip
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.splitlines()[-1] == "replayed 2, skipped 1, failed 0"
    assert [letter.event_id for letter in queues.peek("turns-extraction")] == [turns[1].event_id]
    # Nobody consumes the subscription here: what reached it is what was replayed.
    arrived = wait_for(
        lambda: len(got := pull_all(settings, "turns-extraction")) == 2 and got,
        10,
        "the two replayed messages",
    )
    assert sorted(m.attributes["event_id"] for m in arrived) == sorted(
        [turns[0].event_id, turns[2].event_id]
    )
    assert {m.attributes[REPLAYED_FOR] for m in arrived} == {"turns-extraction"}
    assert {m.ordering_key for m in arrived} == {turns[0].ordering_key}


@contextmanager
def _sigint_as_from_a_terminal() -> Iterator[None]:
    """Children started inside get SIGINT at its default, as a user's do. A test run
    started in the background by a shell without job control ignores SIGINT; its
    children inherit that, and `dlq replay` keeps ignoring it (as under nohup). A
    handler of our own is reset to the default by exec, an ignored signal is not."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous is not None:  # None: set outside Python, cannot be put back
            signal.signal(signal.SIGINT, previous)


def test_ctrl_c_ends_a_replay_with_its_summary_and_hands_back_the_rest(
    settings, topology, publisher, ids
):
    # Every other letter is of another app: skipped, so held until the run ends.
    total = 3000
    apps = ("app-a", "app-b")
    letters = [make_turn(dict(ids, app=apps[n % 2]), n) for n in range(total)]
    dead_letter(publisher, "turns-extraction", letters)
    with _sigint_as_from_a_terminal():
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli",
                "dlq",
                "replay",
                "turns-extraction",
                "--app",
                "app-a",
            ],
            env=settings_env(settings),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        # Its stderr is left unread until the signal: a full pipe (64 KiB, about half
        # of its 1500 lines, one per replayed letter) holds the run back, so the
        # signal comes in the middle of it.
        while not proc.stderr.readline().startswith("replayed "):
            assert proc.poll() is None, "the replay ended before it replayed anything"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    match = re.fullmatch(r"replayed (\d+), skipped (\d+), failed 0", out.splitlines()[-1])
    assert match, out
    replayed, skipped = int(match[1]), int(match[2])
    assert 0 < replayed < total // 2
    assert 0 < skipped < total // 2
    assert err.splitlines()[-1] == (
        "interrupted; what was read and not replayed is back in the dead letters"
    )
    # What it held and did not replay is back at once (else invisible for 10 minutes).
    queues = DeadLetterQueues(settings)
    wait_for(
        lambda: len(queues.peek("turns-extraction")) == total - replayed,
        10,
        f"{total - replayed} dead letters visible again",
    )
