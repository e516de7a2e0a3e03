import json
import uuid

import pytest
from google.api_core import exceptions as gexc

from shared.bus.admin import TopologyAdmin
from shared.bus.topology import SUBSCRIPTIONS, TOPICS
from tests.support import run_cli


def test_apply_creates_everything_once_and_show_agrees(settings):
    admin = TopologyAdmin(settings)
    first = admin.apply()
    expected = 2 * len(TOPICS) + len(SUBSCRIPTIONS) + 2 * len(SUBSCRIPTIONS)
    assert len(first) == expected
    assert {s.status for s in first} == {"created"}
    assert {s.status for s in admin.apply()} == {"ok"}
    assert {s.status for s in admin.show()} == {"ok"}


def test_subscriptions_have_dead_letters_retry_and_ordering(settings, topology):
    sub = topology.subscriber.get_subscription(
        request={"subscription": topology.subscription_path("turns-summary")}
    )
    assert sub.enable_message_ordering is True
    assert sub.dead_letter_policy.dead_letter_topic == topology.topic_path("turns-summary-dlq")
    assert sub.dead_letter_policy.max_delivery_attempts == 6  # the worker's 5, and a backstop
    assert sub.retry_policy.maximum_backoff.total_seconds() == 1
    dlq = topology.subscriber.get_subscription(
        request={"subscription": topology.subscription_path("turns-summary-dlq")}
    )
    assert dlq.topic == topology.topic_path("turns-summary-dlq")
    assert dlq.ack_deadline_seconds == 600
    # Neither expires (an expiration policy without a ttl): an idle dead-letter
    # subscription must not vanish after Pub/Sub's default 31 days.
    for found in (sub, dlq):
        assert "expiration_policy" in found and found.expiration_policy.ttl.total_seconds() == 0
    generate = topology.subscriber.get_subscription(
        request={"subscription": topology.subscription_path("memory-generate-extraction")}
    )
    assert generate.enable_message_ordering is False


def test_the_topic_schema_refuses_a_bad_publish(topology, publisher):
    bad = json.dumps({"event_id": str(uuid.uuid4()), "app": "a"}).encode()
    future = publisher.publish_raw(topology.topic_path("turns"), bad, {"event_type": "x"})
    with pytest.raises(gexc.InvalidArgument):
        future.result(timeout=10)


def test_show_reports_a_difference_and_apply_fixes_it(settings, topology):
    changed = settings.model_copy(update={"max_delivery_attempts": 7, "ack_deadline_seconds": 20})
    result = run_cli(changed, "topology", "show")
    assert result.returncode == 1
    assert "ack deadline 30s, want 20s" in result.stdout
    assert "5 resource(s) missing or different" in result.stdout
    assert run_cli(changed, "topology", "apply").returncode == 0
    assert run_cli(changed, "topology", "show").returncode == 0
