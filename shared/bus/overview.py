"""The figures' reader: each subscription's backlog, the age of its oldest message
not yet settled and its events per second, and the replicas of each worker kind, as
the processes' `Reporter`s left them in Valkey (keys: `figure_keys`).

The backlog is every message published to the subscription's topic less what its
workers settled (applied, duplicate, dropped, skipped or dead-lettered). Published
counts what agent-memory's processes published (the API, the workers, `dlq replay`,
`compact`: each message says so, shared.bus.attributes.COUNTED), and each message
another publisher sent (a script straight to Pub/Sub, Cloud Scheduler) from when a
worker of the subscription first receives it: such a message is not in the backlog
while it waits undelivered. The oldest message is the (settled + 1)-th counted one,
as if the subscription were consumed in order, and its time is that of the report
that counted it, so the age is short by up to one reporting interval. Ages are by
Valkey's clock, as the reports' times are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import valkey

from shared.bus.figure_keys import FigureKeys
from shared.bus.topology import SUBSCRIPTIONS
from shared.config import Settings


@dataclass(frozen=True)
class SubscriptionFigures:
    subscription: str  # short name, as in shared/bus/topology.py
    kind: str  # the worker kind consuming it
    published: int  # by agent-memory's publishers, to its topic
    arrived: int  # by any other publisher, from when a worker received them
    settled: int
    backlog: int  # max(0, published + arrived - settled)
    oldest_unacked_seconds: float | None  # None when backlog == 0
    events_per_second: float  # settled per second, summed over fresh replicas


@dataclass(frozen=True)
class ReplicaFigures:
    kind: str
    replica: str
    ready: bool  # every dependency answers
    in_flight: int  # summed over its subscriptions, as concurrency and held
    concurrency: int
    held: int
    seen_seconds_ago: float
    dependencies: dict[str, bool]


@dataclass(frozen=True)
class Overview:
    subscriptions: list[SubscriptionFigures]  # every subscription of the topology, in order
    replicas: list[ReplicaFigures]  # those with a live heartbeat, by kind then replica


def read_overview(client: valkey.Valkey, settings: Settings) -> Overview:
    """The figures of `settings`' topic prefix, now."""
    keys = FigureKeys.of(settings)
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.hgetall(keys.published)
    pipe.hgetall(keys.settled)
    pipe.hgetall(keys.arrived)
    pipe.zrange(keys.replicas, 0, -1, withscores=True)
    (seconds, micros), published, settled, arrived, members = pipe.execute()
    now = seconds + micros / 1e6
    published, settled, arrived = _ints(published), _ints(settled), _ints(arrived)
    names = [_text(m) for m, _ in members]

    pipe = client.pipeline(transaction=False)
    if names:
        pipe.mget([keys.replica(m) for m in names])
    waiting = []
    for spec in SUBSCRIPTIONS:
        # What it settled of the counted messages (those others sent are settled too).
        done = settled.get(spec.name, 0) - arrived.get(spec.name, 0)
        if published.get(spec.topic, 0) > done:
            waiting.append(spec.name)
            # The first report whose count takes in the (done + 1)-th message.
            pipe.zrangebyscore(keys.published_at(spec.topic), done + 1, "+inf", start=0, num=1)
    firsts = pipe.execute()
    beats = firsts.pop(0) if names else []
    oldest = {name: _age(now, first) for name, first in zip(waiting, firsts, strict=True)}

    replicas, per_second = [], {spec.name: 0.0 for spec in SUBSCRIPTIONS}
    for (member, seen), beat in zip(members, beats, strict=True):
        if beat is None:
            # Its heartbeat expired but it never said goodbye (a stopping replica
            # leaves the index): killed, stopped or stuck. Shown, not ready, until
            # the index forgets it.
            kind, _, name = _text(member).partition("/")
            replicas.append(ReplicaFigures(kind, name, False, 0, 0, 0, max(0.0, now - seen), {}))
            continue
        body = json.loads(beat)
        for subscription, rate in body.get("per_second", {}).items():
            if subscription in per_second:
                per_second[subscription] += rate
        replicas.append(
            ReplicaFigures(
                kind=body["kind"],
                replica=body["replica"],
                ready=bool(body["ready"]),
                in_flight=int(body["in_flight"]),
                concurrency=int(body["concurrency"]),
                held=int(body["held"]),
                seen_seconds_ago=max(0.0, now - seen),
                dependencies={k: bool(v) for k, v in body["dependencies"].items()},
            )
        )
    replicas.sort(key=lambda r: (r.kind, r.replica))

    subscriptions = []
    for spec in SUBSCRIPTIONS:
        p, a, s = published.get(spec.topic, 0), arrived.get(spec.name, 0), settled.get(spec.name, 0)
        subscriptions.append(
            SubscriptionFigures(
                subscription=spec.name,
                kind=spec.consumer,
                published=p,
                arrived=a,
                settled=s,
                backlog=max(0, p + a - s),
                oldest_unacked_seconds=oldest.get(spec.name),
                events_per_second=per_second[spec.name],
            )
        )
    return Overview(subscriptions, replicas)


def _text(value: bytes | str) -> str:
    """Either client's answer (decode_responses or not)."""
    return value.decode() if isinstance(value, bytes) else value


def _ints(found: dict) -> dict[str, int]:
    return {_text(k): int(v) for k, v in found.items()}


def _age(now: float, first: list) -> float | None:
    """Seconds since the report in `first` (none: its times are gone, trimmed or lost)."""
    if not first:
        return None
    at = float(_text(first[0]).split(":", 1)[0])
    return max(0.0, now - at)
