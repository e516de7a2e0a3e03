"""Unary pull's ordering keys, without Pub/Sub: a key's next message reaches the
sink only once the one before it is settled, and a second ack or nack of one
message releases nothing more."""

from __future__ import annotations

from google.pubsub_v1.types import ReceivedMessage

from shared.bus.unary_pull import PulledMessage, UnaryPull


def pulled(delivery: UnaryPull, n: int, key: str) -> PulledMessage:
    received = ReceivedMessage.pb(
        ReceivedMessage(
            ack_id=f"ack-{n}",
            message={"data": b"{}", "ordering_key": key, "message_id": str(n)},
        )
    )
    return PulledMessage(received, delivery)


def delivery_with_sink() -> tuple[UnaryPull, list[str]]:
    sunk: list[str] = []
    delivery = UnaryPull(
        None,  # type: ignore[arg-type]  (never started: nothing is pulled or sent)
        "projects/p/subscriptions/s",
        lambda messages: sunk.extend(m.message_id for m in messages),
        max_outstanding=10,
        lease_seconds=30,
        in_key_order=True,
        backoff_emulated=False,
    )
    return delivery, sunk


def test_a_keys_messages_reach_the_sink_one_at_a_time_and_other_keys_go_at_once():
    delivery, sunk = delivery_with_sink()
    one, two, three, other = (
        pulled(delivery, n, k) for n, k in ((1, "a"), (2, "a"), (3, "a"), (4, "b"))
    )
    sunk.extend(m.message_id for m in delivery._in_turn([one, two, three, other]))
    assert sunk == ["1", "4"]
    one.ack()
    assert sunk == ["1", "4", "2"]
    two.nack()
    assert sunk == ["1", "4", "2", "3"]


def test_a_second_ack_or_nack_of_a_message_releases_nothing_more():
    delivery, sunk = delivery_with_sink()
    one, two, three = (pulled(delivery, n, "a") for n in (1, 2, 3))
    sunk.extend(m.message_id for m in delivery._in_turn([one, two, three]))
    one.ack()
    one.nack()
    one.ack()
    assert sunk == ["1", "2"]
    assert delivery._to_ack == ["ack-1"] and delivery._to_nack == []
