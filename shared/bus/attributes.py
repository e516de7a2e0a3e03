"""The attributes the bus adds to a message on its way through dead letters and
replays; every module that reads or writes them names them from here."""

from __future__ import annotations

# Added by a worker when it dead-letters a message; a replay removes them again.
DEAD_LETTER_REASON = "dead_letter_reason"
DEAD_LETTER_SUBSCRIPTION = "dead_letter_subscription"
DEAD_LETTER_ATTEMPT = "dead_letter_delivery_attempt"
DEAD_LETTER_ORDERING_KEY = "dead_letter_ordering_key"
# Set by `dlq replay`: the one subscription a replayed message is meant for. Every
# other subscription of its topic acknowledges it without handling it (a filter on
# the subscription would do the same on Pub/Sub, but the emulator ignores filters).
REPLAYED_FOR = "replayed_for"
# Set by `dlq replay` on what it publishes: the run's id (see shared.bus.replay).
REPLAY_RUN = "replay_run"
# Set by a publisher whose process reports what it publishes to the figures
# (shared.bus.reporting): the message is in a topic's published count already. A
# worker counts a message without it when it first receives it (a script's, a
# tool's, Cloud Scheduler's), so the figures' backlog takes in every publisher.
COUNTED = "figures_counted"
MAX_ATTRIBUTE_BYTES = 1000  # Pub/Sub allows 1024 bytes per attribute value


def truncate_utf8(text: str, max_bytes: int) -> str:
    """At most `max_bytes` of UTF-8, cut on a character boundary."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


def dead_letter_attributes(
    attributes: dict[str, str], reason: str, subscription: str, attempt: int, ordering_key: str
) -> dict[str, str]:
    """A message's attributes as it goes to `subscription`'s dead letters: what it
    had (but a replay's target), and why, where, on which attempt, with which key."""
    dead = {k: v for k, v in attributes.items() if k != REPLAYED_FOR}
    dead[DEAD_LETTER_REASON] = truncate_utf8(reason, MAX_ATTRIBUTE_BYTES)
    dead[DEAD_LETTER_SUBSCRIPTION] = subscription
    dead[DEAD_LETTER_ATTEMPT] = str(attempt)
    if ordering_key:
        dead[DEAD_LETTER_ORDERING_KEY] = ordering_key
    return dead
