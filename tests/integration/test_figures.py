"""The figures (shared.bus.reporting writes them, shared.bus.overview reads them)
against the real Valkey and emulator: the backlog grows while no worker runs and
drains with a worker process, a replica's heartbeat comes and goes, counts outlive
a reporter and are applied once when a report is sent again, a replay through
`agent-memory dlq replay` leaves the backlog right, and messages another publisher
sent straight to Pub/Sub are in it once a worker has them."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import pytest
import valkey

from services.dev.localstack.process import free_port
from shared.bus.attributes import COUNTED
from shared.bus.dlq import DeadLetterQueues
from shared.bus.figure_history import Point, Recorder, read_history
from shared.bus.overview import Overview, ReplicaFigures, read_overview
from shared.bus.publisher import EventPublisher
from shared.bus.reporting import Reporter
from shared.bus.topology import SUBSCRIPTIONS
from shared.errors import PermanentError
from shared.events import TurnRecorded, encode
from shared.session_buffer import SessionBuffer
from tests.bus_helpers import intercept, make_turn, running, summary_handler
from tests.dlq_helpers import pull_all
from tests.support import REPO, WorkerProcess, run_cli, settings_env, wait_for

# The heartbeat lives three intervals: long enough that a loaded machine reads
# it before it goes, short enough that the test waits for it to go.
INTERVAL = 1.0


@pytest.fixture
def local(settings, topology):
    return settings.model_copy(update={"figures_interval_seconds": INTERVAL})


@pytest.fixture
def publisher(local):
    """The test process's publisher, as the API's: this process reports what it
    publishes (a Reporter of its own), so its messages say they are counted."""
    pub = EventPublisher(local, counted=True)
    yield pub
    pub.stop()


def _publish(publisher, ids, numbers) -> None:
    futures = [publisher.publish(make_turn(ids, n)) for n in numbers]
    for future in futures:
        future.result(timeout=10)


def _by_name(overview: Overview) -> dict[str, tuple[int, int, int]]:
    """Published, settled and backlog of each subscription."""
    return {s.subscription: (s.published, s.settled, s.backlog) for s in overview.subscriptions}


def _figures(published_turns: int, summary: int = 0, extraction: int = 0) -> dict:
    turns = published_turns
    return {
        "turns-summary": (turns, summary, turns - summary),
        "turns-extraction": (turns, extraction, turns - extraction),
        "memory-generate-extraction": (0, 0, 0),
        "compaction-requests": (0, 0, 0),
        "extraction-requests": (0, 0, 0),
    }


def test_the_backlog_grows_without_a_worker_and_drains_with_one(
    local, publisher, valkey_client, ids, tmp_path
):
    # The test process publishes, as the API would, and reports what it published.
    reporter = Reporter(local, valkey_client)
    _publish(publisher, ids, range(1, 6))
    assert reporter.report_once()

    first = read_overview(valkey_client, local)
    assert [s.subscription for s in first.subscriptions] == [s.name for s in SUBSCRIPTIONS]
    assert [s.kind for s in first.subscriptions] == [s.consumer for s in SUBSCRIPTIONS]
    assert _by_name(first) == _figures(5)
    ages = {s.subscription: s.oldest_unacked_seconds for s in first.subscriptions}
    assert ages["turns-summary"] is not None and ages["turns-summary"] >= 0
    assert ages["turns-extraction"] == ages["turns-summary"]
    assert [ages[s] for s in ("memory-generate-extraction", "compaction-requests")] == [None] * 2
    assert first.replicas == []
    wait_for(
        lambda: (
            read_overview(valkey_client, local).subscriptions[0].oldest_unacked_seconds
            > ages["turns-summary"]
        ),
        5,
        "the oldest message to age",
    )

    worker = WorkerProcess(local, "summary", tmp_path / "summary.log", AM_REPLICA_NAME="summary-7")
    try:
        drained = wait_for(
            lambda: (
                (o := read_overview(valkey_client, local)).subscriptions[0].backlog == 0
                and o.replicas
                and o.replicas[0].in_flight == 0
                and o
            ),
            60,
            "turns-summary to drain",
            interval=0.1,
        )
        assert _by_name(drained) == _figures(5, summary=5)
        assert drained.subscriptions[0].oldest_unacked_seconds is None
        assert drained.subscriptions[1].oldest_unacked_seconds >= ages["turns-extraction"]
        [replica] = drained.replicas
        assert replica == ReplicaFigures(
            kind="summary",
            replica="summary-7",
            ready=True,
            in_flight=0,
            concurrency=local.worker_concurrency,
            held=0,
            seen_seconds_ago=replica.seen_seconds_ago,
            dependencies={"pubsub": True, "valkey": True},
        )
        assert 0 <= replica.seen_seconds_ago < 3 * INTERVAL
    finally:
        worker.stop()
    assert worker.proc.returncode == 0, worker.log_text()[-2000:]
    # A replica that stops takes its heartbeat with it; its counts stay.
    after = read_overview(valkey_client, local)
    assert after.replicas == []
    assert _by_name(after) == _figures(5, summary=5)


def test_a_heartbeat_carries_the_rate_and_expires_when_reports_stop(
    local, publisher, valkey_client, ids
):
    buffer = SessionBuffer(valkey_client, 3600)
    # Its own dependency states: the process's gauges keep what earlier tests left.
    reporter = Reporter(
        local,
        valkey_client,
        kind="summary",
        subscriptions=["turns-summary"],
        dependencies=lambda: {"valkey": True},
    )
    assert reporter.report_once()
    [idle] = read_overview(valkey_client, local).replicas
    assert (idle.kind, idle.ready, idle.in_flight, idle.held) == ("summary", True, 0, 0)

    table = {TurnRecorded: summary_handler(local, buffer)}
    with running(local, "turns-summary", table, publisher):
        _publish(publisher, ids, range(1, 4))
        busy = wait_for(
            lambda: (
                reporter.report_once()
                and (o := read_overview(valkey_client, local)).subscriptions[0].settled == 3
                and o
            ),
            30,
            "three turns settled",
        )
    assert _by_name(busy) == _figures(3, summary=3)
    assert busy.replicas[0].concurrency == local.worker_concurrency
    assert busy.subscriptions[0].events_per_second > 0
    assert busy.subscriptions[1].events_per_second == 0.0
    assert reporter.report_once()  # an interval with nothing settled
    assert read_overview(valkey_client, local).subscriptions[0].events_per_second == 0.0

    # No report any more (a process killed): the heartbeat goes after three intervals,
    # and the replica stays listed, not ready, as the last one heard of.
    silent = wait_for(
        lambda: [r for r in read_overview(valkey_client, local).replicas if not r.ready],
        15,
        "the heartbeat to expire",
    )
    assert [(r.kind, r.ready, r.concurrency) for r in silent] == [("summary", False, 0)]
    assert silent[0].seen_seconds_ago >= 2 * local.figures_interval_seconds
    assert _by_name(read_overview(valkey_client, local)) == _figures(3, summary=3)


class ReplyDropper:
    """A TCP proxy to Valkey that can drop what Valkey answers: a request goes
    through and is applied, and its client waits for a reply that never comes."""

    def __init__(self, url: str) -> None:
        found = urlsplit(url)
        self.target = (found.hostname, found.port)
        self.drop = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:  # closed
                return
            upstream = socket.create_connection(self.target)
            for src, dst, replies in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(src, dst, replies), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (replies and self.drop.is_set()):
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            src.close()
            dst.close()

    def close(self) -> None:
        self.server.close()


def test_counts_outlive_a_reporter_and_a_report_sent_again_is_applied_once(
    local, publisher, valkey_client, stack, ids
):
    first = Reporter(local, valkey_client)
    _publish(publisher, ids, range(1, 4))
    first.stop()  # reports what is left
    assert _by_name(read_overview(valkey_client, local)) == _figures(3)

    # The next process's reporter, whose report is applied but its answer lost: it
    # fails, and goes again at the next report, which Valkey knows it applied.
    proxy = ReplyDropper(stack.valkey_url)
    lossy = valkey.Valkey(port=proxy.port, socket_timeout=0.3)
    try:
        second = Reporter(local, lossy)
        _publish(publisher, ids, range(4, 6))
        lossy.ping()  # connected: the report is all that is sent while replies drop
        proxy.drop.set()
        assert second.report_once() is False
        assert _by_name(read_overview(valkey_client, local)) == _figures(5)
        proxy.drop.clear()
        _publish(publisher, ids, range(6, 8))
        assert second.report_once()
        assert _by_name(read_overview(valkey_client, local)) == _figures(7)
    finally:
        lossy.close()
        proxy.close()


def test_an_unreachable_valkey_never_reaches_the_process(local, publisher, ids):
    closed = valkey.Valkey(port=free_port(), socket_connect_timeout=0.2, socket_timeout=0.2)
    reporter = Reporter(local, closed, kind="summary", subscriptions=["turns-summary"])
    _publish(publisher, ids, [1])
    assert reporter.report_once() is False
    reporter.start()
    reporter.stop()  # its last report fails too, quietly


def test_a_replay_keeps_the_backlog_right(local, publisher, valkey_client, ids):
    buffer = SessionBuffer(valkey_client, 3600)
    reporter = Reporter(local, valkey_client, kind="summary", subscriptions=["turns-summary"])
    handler = summary_handler(local, buffer)

    def refuse(_event, _delivery):
        raise PermanentError("refused for the test")

    with running(local, "turns-summary", {TurnRecorded: intercept(handler, refuse)}, publisher):
        _publish(publisher, ids, [1])
        queues = DeadLetterQueues(local)
        try:
            wait_for(lambda: queues.peek("turns-summary"), 30, "the dead letter", interval=0.2)
        finally:
            queues.close()
    assert reporter.report_once()
    # Dead-lettered is settled; the extraction subscription still has the turn.
    assert _by_name(read_overview(valkey_client, local)) == _figures(1, summary=1)

    replayed = run_cli(local, "dlq", "replay", "turns-summary")
    assert (replayed.returncode, replayed.stdout) == (0, "replayed 1, skipped 0, failed 0\n")
    # The CLI counted its publish: one more on the topic, for every subscription of it.
    assert _by_name(read_overview(valkey_client, local)) == _figures(2, summary=1)

    with running(local, "turns-summary", {TurnRecorded: handler}, publisher):
        wait_for(
            lambda: (
                reporter.report_once()
                and read_overview(valkey_client, local).subscriptions[0].backlog == 0
            ),
            30,
            "the replayed turn settled",
        )
    assert _by_name(read_overview(valkey_client, local)) == _figures(2, summary=2)
    reporter.stop()
    assert read_overview(valkey_client, local).replicas == []


def test_the_requests_of_agent_memory_compact_are_counted(local, valkey_client, ids):
    done = run_cli(local, "compact", "--user", ids["user_id"], "--app", ids["app"])
    assert done.returncode == 0, done.stderr
    [requests] = [
        s for s in read_overview(valkey_client, local).subscriptions if s.kind == "compaction"
    ]
    assert (requests.published, requests.settled, requests.backlog) == (1, 0, 1)
    assert requests.oldest_unacked_seconds is not None


def test_messages_another_publisher_sent_are_in_the_backlog_once_a_worker_has_them(
    local, publisher, valkey_client, ids
):
    """What once read 6 for 10 turns waiting: 4 messages of a script, settled but
    never counted as published, made the backlog that much low."""
    buffer = SessionBuffer(valkey_client, 3600)
    reporter = Reporter(local, valkey_client, kind="summary", subscriptions=["turns-summary"])
    release = threading.Event()

    def stall(_event, _delivery):
        assert release.wait(30), "the test never released the handler"

    # Published before the worker pulls: Pub/Sub holds a session's later turns
    # back until the earlier ones are acknowledged, so turns published while the
    # stalled handler holds the first would not reach the worker at all.
    _publish_as_a_script(local, ids, 1, 5)
    try:
        with running(
            local,
            "turns-summary",
            {TurnRecorded: intercept(summary_handler(local, buffer), stall)},
            publisher,
        ):
            # Received and held by the stalled handler: the backlog has them.
            wait_for(
                lambda: (
                    reporter.report_once()
                    and _by_name(read_overview(valkey_client, local))["turns-summary"] == (0, 0, 4)
                ),
                30,
                "the script's four turns in turns-summary's backlog",
            )
            [summary] = [
                s
                for s in read_overview(valkey_client, local).subscriptions
                if s.subscription == "turns-summary"
            ]
            assert summary.arrived == 4
            release.set()
            wait_for(
                lambda: (
                    reporter.report_once()
                    and _by_name(read_overview(valkey_client, local))["turns-summary"] == (0, 4, 0)
                ),
                30,
                "the script's turns settled",
            )
        # No worker of turns-extraction received them: not in its backlog (the page says so).
        assert _by_name(read_overview(valkey_client, local))["turns-extraction"] == (0, 0, 0)
        # Ten turns as the API publishes them, with no worker: a backlog of ten.
        _publish(publisher, ids, range(5, 15))
        assert reporter.report_once()
        figures = _by_name(read_overview(valkey_client, local))
        assert figures["turns-summary"] == (10, 4, 10)
        assert figures["turns-extraction"] == (10, 0, 10)
        oldest = {
            s.subscription: s.oldest_unacked_seconds
            for s in read_overview(valkey_client, local).subscriptions
        }
        assert oldest["turns-summary"] is not None
    finally:
        release.set()
        reporter.stop()


# A script of its own, straight to Pub/Sub: a process that reports nothing.
_SCRIPT = """
import sys
from shared.bus.publisher import EventPublisher
from shared.config import load_settings
from tests.bus_helpers import make_turn
ids = dict(zip(("app", "user_id", "session_id"), sys.argv[1:4]))
publisher = EventPublisher(load_settings())
for n in range(int(sys.argv[4]), int(sys.argv[5])):
    publisher.publish(make_turn(ids, n)).result(30)
publisher.stop()
"""


def _publish_as_a_script(settings, ids, first: int, end: int) -> None:
    subprocess.run(
        [sys.executable, "-c", _SCRIPT, ids["app"], ids["user_id"], ids["session_id"]]
        + [str(first), str(end)],
        env=settings_env(settings),
        cwd=REPO,
        check=True,
        timeout=60,
    )


def test_a_publisher_that_reports_says_so_on_every_message_and_one_that_does_not_never(local):
    counted, plain = EventPublisher(local, counted=True), EventPublisher(local)
    ids = {"app": "a", "user_id": "u", "session_id": "s"}
    first, second = make_turn(ids, 1), make_turn(ids, 2)
    try:
        counted.publish(first).result(timeout=10)
        # A message that said it was counted, sent on by a publisher that does not count.
        message = encode(second)
        attributes = {**message.attributes, COUNTED: "1"}
        plain.publish_raw(plain.topic_path("turns"), message.data, attributes).result(timeout=10)
    finally:
        counted.stop()
        plain.stop()
    received = {
        m.attributes["event_id"]: m.attributes.get(COUNTED)
        for m in pull_all(local, "turns-summary")
    }
    assert received == {first.event_id: "1", second.event_id: None}


def test_the_figures_are_sampled_once_a_step_however_many_apis_sample_them(
    local, publisher, valkey_client, ids
):
    # Two API replicas' recorders, a step of one second.
    settings = local.model_copy(update={"figures_interval_seconds": 0.2})
    first, second = Recorder(valkey_client, settings), Recorder(valkey_client, settings)
    reporter = Reporter(settings, valkey_client)
    _publish(publisher, ids, range(1, 4))
    assert reporter.report_once()
    # The first sample of a step is kept; the other replica's, right after, is not.
    wait_for(first.record, 10, "a new step's first sample")
    assert second.record() is False
    wait_for(second.record, 10, "the next step's sample, by the other replica")
    history = read_history(valkey_client, settings)
    assert history.step == 1.0
    taken = history.samples[-2:]
    assert taken[1].at - taken[0].at == 1.0
    for sample in taken:
        assert sample.points["turns-summary"].backlog == 3
        assert sample.points["compaction-requests"] == Point(0, None, 0.0)
    assert all(s.at > history.now - 3600 for s in history.samples)
