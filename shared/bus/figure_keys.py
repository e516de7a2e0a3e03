"""The Valkey keys of the figures (`reporting` writes them, `overview` reads them).

Every key carries the topic prefix as its hash tag, `am:figures:{<prefix>}:…`: two
stacks on one Valkey keep their own figures, and one script may touch them all (one
slot, should the Valkey be a cluster).

- `published`: hash, topic (short name) → messages published, ever
- `settled`: hash, subscription (short name) → messages settled, ever
- `arrived`: hash, subscription (short name) → messages its workers received that no
  publisher counted (shared.bus.attributes.COUNTED), ever: published too
- `published-at:<topic>`: sorted set, score = `published` after a report, member =
  `<server time>:<reporter>`: when the n-th message had been published at the latest
- `history`: sorted set, score = the start of a step (Valkey's clock), member =
  `<step> <JSON>`: each subscription's backlog, oldest age and events/s then
  (`figure_history`), for an hour
- `replicas`: sorted set, `<kind>/<replica>` → the server time of its last heartbeat
- `replica:<kind>/<replica>`: the heartbeat (JSON), expiring after three intervals
- `applied:<reporter>`: the last report of one process that was applied (its reports
  are applied once each, also when one is sent again after a timeout)
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
import valkey

from shared.bus.topology import TOPICS
from shared.config import Settings

log = structlog.get_logger("agent_memory.figures")

# How long the figures keep when a message was published.
PUBLISHED_AT_SECONDS = 7 * 24 * 3600
# Entries of one topic's `published-at` at most (the newest stay); an entry is added
# per reporting process and interval with new publishes, and dropped once every
# subscription of the topic has settled past it.
PUBLISHED_AT_ENTRIES = 20_000
# A heartbeat lives this many reporting intervals.
HEARTBEAT_INTERVALS = 3


@dataclass(frozen=True)
class FigureKeys:
    prefix: str

    @classmethod
    def of(cls, settings: Settings) -> FigureKeys:
        return cls(settings.topic_prefix)

    def _key(self, suffix: str) -> str:
        return f"am:figures:{{{self.prefix}}}:{suffix}"

    @property
    def published(self) -> str:
        return self._key("published")

    @property
    def settled(self) -> str:
        return self._key("settled")

    @property
    def arrived(self) -> str:
        return self._key("arrived")

    def published_at(self, topic: str) -> str:
        return self._key(f"published-at:{topic}")

    @property
    def history(self) -> str:
        return self._key("history")

    @property
    def replicas(self) -> str:
        return self._key("replicas")

    def replica(self, member: str) -> str:
        """The heartbeat of `member` (`<kind>/<replica>`)."""
        return self._key(f"replica:{member}")

    def applied(self, reporter: str) -> str:
        return self._key(f"applied:{reporter}")


def reset_figures(client: valkey.Valkey, settings: Settings) -> None:
    """Forget the counts of published and settled messages (heartbeats stay): for a
    new, empty emulator, whose lost messages would otherwise stay in the backlog."""
    keys = FigureKeys.of(settings)
    client.delete(
        keys.published, keys.settled, keys.arrived, *(keys.published_at(t.name) for t in TOPICS)
    )


def forget_counts(settings: Settings) -> None:
    """`reset_figures` on `settings`' Valkey; a failure is logged, not raised (`up`
    starts a new emulator whatever the figures say)."""
    from shared.bootstrap import make_valkey  # bootstrap imports the bus

    client = make_valkey(settings)
    try:
        reset_figures(client, settings)
    except valkey.ValkeyError as exc:
        log.warning("the figures' counts could not be reset", error=repr(exc))
    finally:
        client.close()
