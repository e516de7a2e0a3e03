"""The figures over time: one sample of each subscription's backlog, oldest
unsettled message's age and events per second every step, kept for an hour in
Valkey (the key `figure_keys.history`), for the console's chart.

The API's reporter takes the samples (`Reporter(history=True)`). A step is a
bucket of Valkey's clock, and the first sample of a bucket is the one kept, so
any number of API replicas write one series; each tries twice a step, so no
bucket is missed while one runs. A bucket without a sample (no API ran) is a gap.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import structlog
import valkey

from shared.bus.figure_keys import FigureKeys
from shared.bus.overview import read_overview
from shared.config import Settings

log = structlog.get_logger("agent_memory.figures")

HISTORY_SECONDS = 3600
STEP_INTERVALS = 5  # a sample every five reporting intervals: 10 s by default

# KEYS: history. ARGV: step (s), kept (s), the sample (JSON). Answers the bucket
# if this sample was kept, else 0.
_RECORD = """
local t = redis.call('TIME')
local now = tonumber(t[1])
local step = tonumber(ARGV[1])
local bucket = now - now % step
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[1], 2 * tonumber(ARGV[2]))
if redis.call('ZCOUNT', KEYS[1], bucket, bucket) > 0 then return 0 end
redis.call('ZADD', KEYS[1], bucket, bucket .. ' ' .. ARGV[3])
return bucket
"""


def step_seconds(settings: Settings) -> float:
    return max(1.0, settings.figures_interval_seconds * STEP_INTERVALS)


@dataclass(frozen=True)
class Point:
    backlog: int
    oldest_seconds: float | None  # None: nothing waits, or its age is not known
    events_per_second: float


@dataclass(frozen=True)
class Sample:
    at: float  # the start of its step, by Valkey's clock (seconds since the epoch)
    points: dict[str, Point]  # subscription (short name) -> its figures then


@dataclass(frozen=True)
class History:
    now: float  # Valkey's clock when read
    step: float
    samples: list[Sample]  # the last HISTORY_SECONDS, oldest first


class Recorder:
    """Takes a sample when one is due (call `maybe_record` every interval)."""

    def __init__(self, client: valkey.Valkey, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.key = FigureKeys.of(settings).history
        self.step = step_seconds(settings)
        self._script = client.register_script(_RECORD)
        self._tried_at = -self.step
        self._failing = False

    def maybe_record(self) -> None:
        if time.monotonic() - self._tried_at < self.step / 2:
            return
        self._tried_at = time.monotonic()
        try:
            self.record()
        except Exception as exc:  # the figures never break the process: next step
            if not self._failing:
                log.warning("no sample of the figures taken; trying again", error=repr(exc))
            self._failing = True
        else:
            self._failing = False

    def record(self) -> bool:
        """A sample of the figures now, kept if its step has none yet."""
        overview = read_overview(self.client, self.settings)
        sample = {
            s.subscription: [s.backlog, s.oldest_unacked_seconds, round(s.events_per_second, 3)]
            for s in overview.subscriptions
        }
        args: list[int | str] = [
            int(self.step),
            HISTORY_SECONDS,
            json.dumps(sample, separators=(",", ":")),
        ]
        return bool(self._script(keys=[self.key], args=args))


def read_history(client: valkey.Valkey, settings: Settings) -> History:
    """The samples of the last hour."""
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.zrangebyscore(FigureKeys.of(settings).history, "-inf", "+inf")
    (seconds, micros), members = pipe.execute()
    now = seconds + micros / 1e6
    samples = []
    for member in members:
        text = member.decode() if isinstance(member, bytes) else member
        at, _, body = text.partition(" ")
        if float(at) < now - HISTORY_SECONDS:
            continue
        points = {
            name: Point(int(backlog), oldest, float(rate))
            for name, (backlog, oldest, rate) in json.loads(body).items()
        }
        samples.append(Sample(float(at), points))
    return History(now, step_seconds(settings), samples)
