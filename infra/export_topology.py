"""Write `infra/terraform/topology.json`: the Pub/Sub topology that `agent-memory
topology apply` creates, as data that the Terraform reads with `jsondecode(file(...))`.

One source for names and policies: the subscriptions, their topics, ordering and
consumers, and the worker kinds, come from `shared/bus/topology.py`, the dead-letter names from its
`dead_letter_name`, the dead-letter subscriptions' ack deadline from
`shared/bus/admin.py`, and the policy defaults (prefix, ack deadline, delivery
attempts, retry backoff) from the defaults of `shared/config.py`. After changing
any of them run

    .venv/bin/python infra/export_topology.py

`tests/unit/test_infra.py` fails while the committed file differs from what this
script writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from shared.bus.admin import DEAD_LETTER_ACK_DEADLINE
from shared.bus.topology import (
    SUBSCRIPTIONS,
    TOPICS,
    WORKER_KINDS,
    dead_letter_name,
    schema_name,
    subscriptions_of,
)
from shared.config import Settings

OUTPUT = Path(__file__).resolve().parent / "terraform" / "topology.json"

# The settings that shape the topology; Terraform's variables of the same name
# override them, as the AM_* variables do for `topology apply`.
POLICY_SETTINGS = (
    "topic_prefix",
    "ack_deadline_seconds",
    "max_delivery_attempts",
    "retry_min_backoff_seconds",
    "retry_max_backoff_seconds",
)


def topology_document() -> dict[str, Any]:
    """The topology as plain data: short names (without the prefix) and defaults."""
    fields = Settings.model_fields
    return {
        "_generated": "by infra/export_topology.py from shared/bus/topology.py; do not edit",
        "defaults": {name: fields[name].default for name in POLICY_SETTINGS},
        "dead_letter_ack_deadline_seconds": DEAD_LETTER_ACK_DEADLINE,
        "topics": {
            spec.name: {
                "event_type": spec.event_type,
                "schema": schema_name("", spec.event_type),
                "schema_file": f"schemas/events/{spec.event_type}.avsc",
            }
            for spec in TOPICS
        },
        "subscriptions": {
            spec.name: {
                "topic": spec.topic,
                "ordered": spec.ordered,
                "consumer": spec.consumer,
                "dead_letter": dead_letter_name(spec.name),
            }
            for spec in SUBSCRIPTIONS
        },
        # One Cloud Run service per worker kind (run.tf's `for_each`).
        "workers": {kind: [s.name for s in subscriptions_of(kind)] for kind in WORKER_KINDS},
    }


def render() -> str:
    return json.dumps(topology_document(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
