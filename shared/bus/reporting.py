"""The figures' writer: every process adds what it published and settled to Valkey,
and each worker writes its heartbeat (`overview` reads them back).

Pub/Sub keeps a subscription's backlog in Cloud Monitoring only, and the emulator
nowhere, so the processes count it themselves: every `AM_FIGURES_INTERVAL_SECONDS`
a `Reporter` reads this process's own counters (`agent_memory_events_published_total`,
`agent_memory_messages_total` of the settled outcomes) and adds what they grew by
since its last report to cumulative counts in Valkey, which outlive the process; a
topic's new count goes with the time of the report, so that a reader can tell when
the oldest message not yet settled was published. A worker's report also carries
its heartbeat: readiness, messages in flight and held, concurrency, and events
settled per second.

A report is applied once however often it is sent (it is numbered); one that fails
is sent again at the next interval, and Valkey's errors never reach the process.
A graceful stop reports once more; a process killed loses at most one interval of
counts. Call `report_once` from one thread at a time (the reporter's own, or a
process that runs none).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

import structlog
import valkey
from prometheus_client.metrics import MetricWrapperBase

from shared.bootstrap import make_valkey
from shared.bus.contract import SETTLED as SETTLED_OUTCOMES
from shared.bus.figure_history import Recorder
from shared.bus.figure_keys import (
    HEARTBEAT_INTERVALS,
    PUBLISHED_AT_ENTRIES,
    PUBLISHED_AT_SECONDS,
    FigureKeys,
)
from shared.bus.topology import SUBSCRIPTIONS, TOPICS
from shared.config import Settings
from shared.metrics import (
    DEPENDENCY_UP,
    EVENTS_PUBLISHED,
    MESSAGES,
    MESSAGES_HELD,
    MESSAGES_IN_FLIGHT,
    MESSAGES_UNCOUNTED,
    WORKER_CONCURRENCY,
)

log = structlog.get_logger("agent_memory.figures")

# The outcomes after which a message is gone from its subscription (`retried` is not).
SETTLED = frozenset(str(o) for o in SETTLED_OUTCOMES)
# How long Valkey remembers the last report of a process it applied.
APPLIED_SECONDS = 24 * 3600
# Heartbeats older than this leave the index of replicas.
REPLICA_INDEX_SECONDS = 600
GONE = "gone"  # the heartbeat of a replica that stopped: remove it

# KEYS: published, settled, applied, replicas, heartbeat, arrived, then published-at
# per topic. ARGV: seq, reporter, applied ttl, heartbeat (JSON, GONE or ''), heartbeat
# ttl (ms), member, published-at retention, entries, n, n × (topic, delta, its
# subscriptions), m, m × (subscription, settled delta), a, a × (subscription, arrived
# delta).
_REPORT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ntopics = tonumber(ARGV[9])
local at_subs = 10 + 3 * ntopics
local at_arrived = at_subs + 1 + 2 * tonumber(ARGV[at_subs])
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[3]) or '0') then
  for s = 0, tonumber(ARGV[at_subs]) - 1 do
    redis.call('HINCRBY', KEYS[2], ARGV[at_subs + 1 + 2 * s], ARGV[at_subs + 2 + 2 * s])
  end
  for s = 0, tonumber(ARGV[at_arrived]) - 1 do
    redis.call('HINCRBY', KEYS[6], ARGV[at_arrived + 1 + 2 * s], ARGV[at_arrived + 2 + 2 * s])
  end
  local retention, entries = tonumber(ARGV[7]), tonumber(ARGV[8])
  for k = 0, ntopics - 1 do
    local topic, delta, subs = ARGV[10 + 3 * k], ARGV[11 + 3 * k], ARGV[12 + 3 * k]
    local total = redis.call('HINCRBY', KEYS[1], topic, delta)
    local at = KEYS[7 + k]
    redis.call('ZADD', at, total, string.format('%.6f', now) .. ':' .. ARGV[2])
    -- What every subscription of the topic has settled is asked for no more (the
    -- messages no publisher counted are settled too, but were never published here).
    local floor = nil
    for sub in string.gmatch(subs, '[^,]+') do
      local n = tonumber(redis.call('HGET', KEYS[2], sub) or '0')
        - tonumber(redis.call('HGET', KEYS[6], sub) or '0')
      if floor == nil or n < floor then floor = n end
    end
    if floor ~= nil and floor > 0 then redis.call('ZREMRANGEBYSCORE', at, '-inf', floor) end
    for _ = 1, 100 do
      local first = redis.call('ZRANGE', at, 0, 0)
      if #first == 0 or tonumber(string.match(first[1], '^[^:]+')) >= now - retention then
        break
      end
      redis.call('ZREMRANGEBYRANK', at, 0, 0)
    end
    redis.call('ZREMRANGEBYRANK', at, 0, -entries - 1)
    redis.call('EXPIRE', at, retention)
  end
  redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[3])
end
if ARGV[4] == 'gone' then
  redis.call('DEL', KEYS[5])
  redis.call('ZREM', KEYS[4], ARGV[6])
elseif ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], ARGV[4], 'PX', ARGV[5])
  redis.call('ZADD', KEYS[4], now, ARGV[6])
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - REPLICA_INDEX_SECONDS)
""".replace("REPLICA_INDEX_SECONDS", str(REPLICA_INDEX_SECONDS))

# Each dependency of the process: True while it answers.
DependencyStates = Callable[[], Mapping[str, bool]]


@dataclass(frozen=True)
class _Counts:
    published: dict[str, int]  # topic → messages published
    settled: dict[str, int]  # subscription → messages settled
    arrived: dict[str, int]  # subscription → messages no publisher counted, received

    def since(self, earlier: _Counts) -> _Counts:
        return _Counts(
            _grown(self.published, earlier.published),
            _grown(self.settled, earlier.settled),
            _grown(self.arrived, earlier.arrived),
        )


@dataclass(frozen=True)
class _Batch:
    seq: int
    counts: _Counts
    heartbeat: str  # JSON, GONE, or '' (none)


class Reporter:
    """Writes this process's figures to Valkey, every interval once started."""

    def __init__(
        self,
        settings: Settings,
        client: valkey.Valkey,
        *,
        kind: str | None = None,
        subscriptions: Iterable[str] = (),
        dependencies: DependencyStates | None = None,
        owns_client: bool = False,
        history: bool = False,
    ) -> None:
        """`kind`: the worker kind, whose replica gets a heartbeat (None: counts only,
        as the API and the CLI report); `subscriptions`: those it consumes; `history`:
        it also samples the figures for their chart (the API's, `figure_history`)."""
        self.client = client
        self.keys = FigureKeys.of(settings)
        self.interval = settings.figures_interval_seconds
        self.kind = kind
        self.replica = settings.replica_name or f"{socket.gethostname()}:{os.getpid()}"
        self.member = f"{kind}/{self.replica}"
        self.subscriptions = tuple(subscriptions)
        self._dependencies = dependencies or _dependency_gauges
        self._owns_client = owns_client
        self._history = Recorder(client, settings) if history else None
        self._id = uuid.uuid4().hex  # numbers this process's reports
        self._subscribers = {
            t.name: ",".join(s.name for s in SUBSCRIPTIONS if s.topic == t.name) for t in TOPICS
        }
        self._script = client.register_script(_REPORT)
        # What the counters held before: another reporter's (in a test process) or none.
        self._seen = self._counts()
        self._seen_at = time.monotonic()
        self._seq = 0
        self._unsent: _Batch | None = None
        self._failing = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- lifecycle (services.worker.Background) ------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="figures", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Report once more (a stopping replica's heartbeat goes); idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        self.report_once(final=True)
        if self._owns_client:
            self.client.close()

    def _run(self) -> None:
        self._report_and_sample()
        while not self._stopping.wait(self.interval):
            self._report_and_sample()

    def _report_and_sample(self) -> None:
        self.report_once()
        if self._history is not None:
            self._history.maybe_record()

    # -- reporting -------------------------------------------------------------------
    def report_once(self, final: bool = False) -> bool:
        """Add what the counters grew by since the last report to Valkey, and write
        the heartbeat (`final`: remove it); False if Valkey did not take it."""
        if self._unsent is not None:
            if not self._send(self._unsent):
                return False
            self._unsent = None
        batch = self._next_batch(final)
        if batch is None:
            return True
        if not self._send(batch):
            # The same numbers again next time: applied once, whether this one was or not.
            self._unsent = replace(batch, heartbeat="")
            return False
        return True

    def _next_batch(self, final: bool) -> _Batch | None:
        counts, now = self._counts(), time.monotonic()
        grown = counts.since(self._seen)
        heartbeat = ""
        if self.kind is not None:
            heartbeat = GONE if final else json.dumps(self._heartbeat(grown, now - self._seen_at))
        self._seen, self._seen_at = counts, now
        if not grown.published and not grown.settled and not grown.arrived and not heartbeat:
            return None
        self._seq += 1
        return _Batch(self._seq, grown, heartbeat)

    def _heartbeat(self, grown: _Counts, seconds: float) -> dict[str, object]:
        dependencies = dict(self._dependencies())
        seconds = max(seconds, 1e-3)
        return {
            "kind": self.kind,
            "replica": self.replica,
            "ready": all(dependencies.values()),
            "in_flight": _gauge_sum(MESSAGES_IN_FLIGHT, self.subscriptions),
            "concurrency": _gauge_sum(WORKER_CONCURRENCY, self.subscriptions),
            "held": _gauge_sum(MESSAGES_HELD, self.subscriptions),
            "dependencies": dependencies,
            "per_second": {s: grown.settled.get(s, 0) / seconds for s in self.subscriptions},
        }

    def _send(self, batch: _Batch) -> bool:
        k = self.keys
        topics = sorted(batch.counts.published)
        settled = sorted(batch.counts.settled.items())
        arrived = sorted(batch.counts.arrived.items())
        keys = [k.published, k.settled, k.applied(self._id), k.replicas, k.replica(self.member)]
        keys += [k.arrived, *(k.published_at(t) for t in topics)]
        ttl_ms = int(self.interval * HEARTBEAT_INTERVALS * 1000)
        args: list[int | float | str] = [
            batch.seq,
            self._id,
            APPLIED_SECONDS,
            batch.heartbeat,
            ttl_ms,
        ]
        args += [self.member, PUBLISHED_AT_SECONDS, PUBLISHED_AT_ENTRIES, len(topics)]
        for topic in topics:
            args += [topic, batch.counts.published[topic], self._subscribers[topic]]
        for counts in (settled, arrived):
            args.append(len(counts))
            for subscription, count in counts:
                args += [subscription, count]
        try:
            self._script(keys=keys, args=args)
        except Exception as exc:  # the figures never break the process: next interval
            if not self._failing:
                log.warning("figures not reported; trying again", error=repr(exc))
            self._failing = True
            return False
        if self._failing:
            log.info("figures reported again")
            self._failing = False
        return True

    def _counts(self) -> _Counts:
        published = {
            labels["topic"]: n
            for labels, n in _samples(EVENTS_PUBLISHED)
            if labels["topic"] in self._subscribers
        }
        settled: dict[str, int] = {}
        for labels, n in _samples(MESSAGES):
            subscription = labels["subscription"]
            if subscription in self.subscriptions and labels["outcome"] in SETTLED:
                settled[subscription] = settled.get(subscription, 0) + n
        arrived = {
            labels["subscription"]: n
            for labels, n in _samples(MESSAGES_UNCOUNTED)
            if labels["subscription"] in self.subscriptions
        }
        return _Counts(published, settled, arrived)


def start_reporting(
    settings: Settings,
    *,
    kind: str | None = None,
    subscriptions: Iterable[str] = (),
    dependencies: DependencyStates | None = None,
    history: bool = False,
) -> Reporter | None:
    """A started `Reporter` with a Valkey client of its own; None without
    AM_VALKEY_URL. `stop()` it after the process's publisher has stopped, so that its
    last publishes are in."""
    reporter = _reporter(settings, kind, subscriptions, dependencies, history)
    if reporter is not None:
        reporter.start()
    return reporter


@contextmanager
def reporting(settings: Settings) -> Iterator[Reporter | None]:
    """Report once, at the end, what the block published (a CLI command's replay);
    the reporter is None without AM_VALKEY_URL."""
    reporter = _reporter(settings, None, (), None)
    try:
        yield reporter
    finally:
        if reporter is not None:
            reporter.stop()


def _reporter(
    settings: Settings,
    kind: str | None,
    subscriptions: Iterable[str],
    dependencies: DependencyStates | None,
    history: bool = False,
) -> Reporter | None:
    if not settings.valkey_url:
        log.debug("figures not reported: AM_VALKEY_URL is not set")
        return None
    return Reporter(
        settings,
        make_valkey(settings),
        kind=kind,
        subscriptions=subscriptions,
        dependencies=dependencies,
        owns_client=True,
        history=history,
    )


def _samples(metric: MetricWrapperBase) -> Iterator[tuple[dict[str, str], int]]:
    """A counter's totals or a gauge's values, with their labels."""
    for family in metric.collect():
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                yield sample.labels, int(sample.value)


def _gauge_sum(gauge: MetricWrapperBase, subscriptions: tuple[str, ...]) -> int:
    return sum(n for labels, n in _samples(gauge) if labels["subscription"] in subscriptions)


def _dependency_gauges() -> dict[str, bool]:
    return {labels["dependency"]: n == 1 for labels, n in _samples(DEPENDENCY_UP)}


def _grown(now: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in now.items() if n > before.get(k, 0)}
