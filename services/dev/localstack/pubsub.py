"""The Pub/Sub topology as `agent-memory up` applies it: at start-up, and again on
an emulator it started anew (which holds nothing, not even the topics)."""

from __future__ import annotations

import structlog

from services.dev.localstack.endpoints import Endpoints
from shared.bus.admin import TopologyAdmin
from shared.bus.figure_keys import forget_counts
from shared.config import Settings

log = structlog.get_logger("agent_memory.up")


def apply_topology(settings: Settings, endpoints: Endpoints, own_emulator: bool) -> list[str]:
    """Apply the topology on `endpoints`' Pub/Sub; what it created or changed. With
    an emulator of the stack's own, the figures' counts restart too: a new one
    holds no message."""
    local = settings.model_copy(
        update={"pubsub_emulator_host": endpoints.pubsub_emulator_host or None}
    )
    states = TopologyAdmin(local).apply()
    if own_emulator:
        forget_counts(local.model_copy(update={"valkey_url": endpoints.valkey_url}))
    changed = [
        f"{st.kind} {st.name.rsplit('/', 1)[1]}: {st.status}" for st in states if st.status != "ok"
    ]
    log.debug("topology applied", changed=changed)
    return changed
