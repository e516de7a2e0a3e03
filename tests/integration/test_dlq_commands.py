"""`agent-memory dlq list|show|purge` as an operator uses them, and what they say
when there is no Pub/Sub to talk to."""

import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import sys
import termios
import time
from datetime import UTC, datetime, timedelta

import pytest

from services.dev.localstack.process import free_port
from shared.bus.dlq import COUNT_CAP, DeadLetterQueues
from tests.bus_helpers import make_turn
from tests.dlq_helpers import dead_letter
from tests.support import REPO, run_cli, settings_env, wait_for

ACTIONS = [
    ["list"],
    ["show", "turns-summary"],
    ["replay", "turns-summary"],
    ["purge", "turns-summary", "--event-id", "e"],
]


def _line(event_id: str, app: str) -> str:
    """The pattern of one `show`/`purge` line of a hand-made dead letter."""
    return rf"{event_id}  turn\.recorded\.v1  app={app}  attempts=5  age=\d+s  reason=test"


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "dlq", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_purge_shows_first_and_deletes_only_with_yes(settings, topology, publisher, ids):
    turns = [make_turn(ids, n) for n in (1, 2, 3)]
    dead_letter(publisher, "turns-summary", turns)
    queues = DeadLetterQueues(settings)
    a, b, c = (t.event_id for t in turns)

    shown = run_cli(settings, "dlq", "purge", "turns-summary", "--event-id", a, "--event-id", c)
    assert shown.returncode == 0, shown.stderr
    *lines, last = shown.stdout.splitlines()
    assert last == "nothing purged; add --yes to delete these 2 dead letters for good"
    assert sorted(line.split()[0] for line in lines) == sorted([a, c])
    assert all(re.fullmatch(_line(line.split()[0], ids["app"]), line) for line in lines)
    assert len(queues.peek("turns-summary")) == 3

    dead = f"{settings.topic_prefix}turns-summary-dlq"
    for missing in (["--event-id", "nope"], ["--event-id", a, "--event-id", "nope", "--yes"]):
        refused = run_cli(settings, "dlq", "purge", "turns-summary", *missing)
        assert refused.returncode == 2
        assert refused.stderr == (
            f"agent-memory: event id nope is not in {dead}; nothing was changed\n"
        )
        assert refused.stdout == ""
    unknown = run_cli(settings, "dlq", "purge", "no-such-subscription", "--event-id", a, "--yes")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("agent-memory: unknown subscription 'no-such-subscription'")
    assert len(queues.peek("turns-summary")) == 3

    purged = run_cli(
        settings, "dlq", "purge", "turns-summary", "--event-id", a, "--event-id", c, "--yes"
    )
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.splitlines()[-1] == "purged 2"
    assert [letter.event_id for letter in queues.peek("turns-summary")] == [b]


def test_show_says_how_many_wait_and_prints_the_oldest(settings, topology, publisher, ids):
    first = [make_turn(ids, 1), make_turn(ids, 2)]
    dead_letter(publisher, "turns-summary", first)
    queues = DeadLetterQueues(settings)
    newest = max(letter.dead_lettered_at for letter in queues.peek("turns-summary"))
    # The rest must be published later than the first two, whose time has ms steps.
    wait_for(lambda: datetime.now(UTC) > newest + timedelta(milliseconds=5), 5, "a later ms")
    dead_letter(publisher, "turns-summary", [make_turn(ids, n) for n in range(3, 38)])

    shown = run_cli(settings, "dlq", "show", "turns-summary", "--limit", "2")
    assert shown.returncode == 0, shown.stderr
    head, *lines = shown.stdout.splitlines()
    assert head == "37 dead letters in turns-summary; showing the oldest 2 (not consumed)"
    assert sorted(line.split()[0] for line in lines) == sorted(t.event_id for t in first)
    assert all(re.fullmatch(_line(line.split()[0], ids["app"]), line) for line in lines)

    everything = run_cli(settings, "dlq", "show", f"{settings.topic_prefix}turns-summary-dlq")
    assert everything.stdout.splitlines()[0] == (
        "37 dead letters in turns-summary; showing the oldest 20 (not consumed)"
    )
    assert len(everything.stdout.splitlines()) == 21
    empty = run_cli(settings, "dlq", "show", "turns-extraction")
    assert empty.stdout == "0 dead letters in turns-extraction (not consumed)\n"
    assert len(queues.peek("turns-summary")) == 37


@pytest.mark.slow
def test_counting_stops_at_the_cap(settings, topology, publisher, ids):
    dead_letter(publisher, "compaction-requests", [make_turn(ids, n) for n in range(COUNT_CAP + 1)])
    listed = run_cli(settings, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    prefix = settings.topic_prefix
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert rows == [
        ["turns-summary", f"{prefix}turns-summary-dlq", "0"],
        ["turns-extraction", f"{prefix}turns-extraction-dlq", "0"],
        ["memory-generate-extraction", f"{prefix}memory-generate-extraction-dlq", "0"],
        ["compaction-requests", f"{prefix}compaction-requests-dlq", f"{COUNT_CAP}+"],
        ["extraction-requests", f"{prefix}extraction-requests-dlq", "0"],
    ]
    shown = run_cli(settings, "dlq", "show", "compaction-requests", "--limit", "1")
    assert shown.stdout.splitlines()[0] == (
        f"{COUNT_CAP}+ dead letters in compaction-requests; showing the oldest 1 (not consumed)"
    )


def test_list_has_a_header_aligned_columns_and_answers_quickly(settings, topology, publisher, ids):
    dead_letter(publisher, "turns-extraction", [make_turn(ids, n) for n in range(12)])
    started = time.monotonic()
    listed = run_cli(settings, "dlq", "list")
    elapsed = time.monotonic() - started
    assert listed.returncode == 0, listed.stderr
    prefix = settings.topic_prefix
    width = len("memory-generate-extraction")
    dead_width = len(f"{prefix}memory-generate-extraction-dlq")
    assert listed.stdout.splitlines() == [
        f"{'SUBSCRIPTION':<{width}}  {'DEAD-LETTER SUBSCRIPTION':<{dead_width}}  WAITING",
        *[
            f"{name:<{width}}  {prefix + name + '-dlq':<{dead_width}}  {count:>7}"
            for name, count in [
                ("turns-summary", 0),
                ("turns-extraction", 12),
                ("memory-generate-extraction", 0),
                ("compaction-requests", 0),
                ("extraction-requests", 0),
            ]
        ],
    ]
    # Empty pulls waiting out their timeout one after the other took 9 s for four.
    assert elapsed < 6, f"dlq list took {elapsed:.1f} s"
    assert listed.stderr == ""


def test_progress_is_shown_on_a_terminal_only(settings, topology, publisher, ids):
    dead_letter(publisher, "turns-summary", [make_turn(ids, 1)])
    controller, terminal = os.openpty()
    # A terminal of 24 x 100, as a real one has (tqdm draws nothing in 0 columns).
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "services.cli", "dlq", "show", "turns-summary"],
            env=settings_env(settings),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=terminal,
            timeout=60,
        )
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
    assert proc.returncode == 0
    # tqdm's counter with its rate, redrawn in place.
    assert "reading turns-summary: 0 letters [00:00, ? letters/s]" in seen.decode()
    piped = run_cli(settings, "dlq", "show", "turns-summary")
    assert piped.returncode == 0
    assert piped.stderr == ""


def test_without_an_emulator_address_every_action_says_what_to_export(settings, tmp_path):
    env = settings_env(settings, AM_DATA_DIR=str(tmp_path))
    del env["PUBSUB_EMULATOR_HOST"]
    expected = (
        "agent-memory: PUBSUB_EMULATOR_HOST is not set and AM_PUBSUB_BACKEND is `emulator`: "
        "no Pub/Sub to read.\n"
        "For a local stack, export the variables `agent-memory up` prints "
        "(also in <data-dir>/endpoints.json):\n"
        "  export PUBSUB_EMULATOR_HOST=127.0.0.1:PORT\n"
        "  export GOOGLE_CLOUD_PROJECT=agent-memory-local\n"
        "For Pub/Sub in Google Cloud: export AM_PUBSUB_BACKEND=gcp GOOGLE_CLOUD_PROJECT=PROJECT\n"
    )
    for action in ACTIONS:
        result = _cli(env, *action)
        assert (result.returncode, result.stdout, result.stderr) == (2, "", expected), action

    # With a stack's endpoints in the data folder, the values to export are given.
    endpoints = {"pubsub_emulator_host": "127.0.0.1:8085", "google_cloud_project": "proj-x"}
    (tmp_path / "endpoints.json").write_text(json.dumps(endpoints))
    result = _cli(env, "list")
    assert result.returncode == 2
    assert result.stderr == expected + (
        f"{tmp_path / 'endpoints.json'} names a stack's emulator:\n"
        "  export PUBSUB_EMULATOR_HOST=127.0.0.1:8085\n"
        "  export GOOGLE_CLOUD_PROJECT=proj-x\n"
    )


def test_an_emulator_that_does_not_answer_is_one_line_within_seconds(settings):
    refused = f"127.0.0.1:{free_port()}"
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never speaks
        mute = f"127.0.0.1:{silent.getsockname()[1]}"
        # Each action against a closed port; one against a server that never answers.
        for host, actions in ((refused, ACTIONS), (mute, ACTIONS[:1])):
            env = settings_env(settings, PUBSUB_EMULATOR_HOST=host)
            for action in actions:
                started = time.monotonic()
                result = _cli(env, *action)
                elapsed = time.monotonic() - started
                assert result.returncode == 1, (host, action, result.stderr)
                # A replay ends with its summary, whatever ended it.
                summary = "replayed 0, skipped 0, failed 0\n" if action[0] == "replay" else ""
                assert result.stdout == summary
                line = f"agent-memory: the Pub/Sub emulator at {host} did not answer: "
                assert result.stderr.startswith(line), result.stderr
                assert result.stderr.count("\n") == 1, result.stderr
                assert elapsed < 15, f"{action} against {host} took {elapsed:.1f} s"


def test_without_the_topology_each_action_says_to_apply_it(settings):
    # No `topology` fixture: this prefix has no topics and no subscriptions.
    for action in ACTIONS:
        result = run_cli(settings, "dlq", *action)
        assert result.returncode == 1, (action, result.stderr)
        assert result.stderr.startswith("agent-memory: Pub/Sub: "), result.stderr
        assert result.stderr.endswith(" (run `agent-memory topology apply`?)\n"), result.stderr
        assert result.stderr.count("\n") == 1
