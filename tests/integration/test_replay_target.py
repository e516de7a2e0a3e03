"""A replayed message is handled by the one subscription it is meant for."""

from prometheus_client import REGISTRY

from shared.bus.attributes import REPLAYED_FOR
from shared.bus.contract import Outcome
from shared.events import TurnRecorded, encode
from tests.bus_helpers import Recorder, make_turn, running
from tests.support import stays, wait_for


def test_a_replay_for_one_subscription_is_acknowledged_unhandled_by_the_others(
    settings, topology, publisher, ids
):
    summary, extraction = Recorder(), Recorder()

    def applied(event, delivery):
        return Outcome.APPLIED

    turn = make_turn(ids, 1)
    message = encode(turn)
    topic = topology.topic_path("turns")
    attributes = dict(message.attributes, **{REPLAYED_FOR: "turns-summary"})
    tables = {
        "turns-summary": {TurnRecorded: summary.wrap(applied)},
        "turns-extraction": {TurnRecorded: extraction.wrap(applied)},
    }

    def skipped() -> float:
        labels = {"subscription": "turns-extraction", "outcome": "skipped"}
        return REGISTRY.get_sample_value("agent_memory_messages_total", labels) or 0.0

    before = skipped()
    with (
        running(settings, "turns-summary", tables["turns-summary"], publisher),
        running(settings, "turns-extraction", tables["turns-extraction"], publisher) as other,
    ):
        publisher.publish_raw(topic, message.data, attributes, message.ordering_key).result(10)
        wait_for(lambda: summary.count() == 1, 30, "the summary subscription's delivery")
        wait_for(lambda: skipped() == before + 1, 30, "turns-extraction to skip the replay")
        # Acknowledged, not nacked: a redelivery would come back within a second.
        stays(lambda: skipped() == before + 1, 3, "one delivery to turns-extraction")
        assert other.running
    assert summary.outcomes("turn-0001") == ["applied"]
    assert extraction.count() == 0
