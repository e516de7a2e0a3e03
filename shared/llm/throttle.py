"""The workers' limit of model calls per app (`AM_LLM_MAX_CALLS_PER_MINUTE`): at most
N calls for one app in any window of 60 seconds, across every replica and worker
kind.

The calls are counted in Valkey, one sorted set per app (`am:llm-calls:<app>`)
holding a member per call admitted, scored by the server's clock (`TIME`), so
replicas with clocks of their own agree. One Lua script drops what left the
window, then admits the call or answers how long until the window has room; the
key expires a window after its last call.

A call over the limit waits here, before it is sent: the worker's message stays
leased by its runtime meanwhile, no delivery attempt is spent and nothing is
dead-lettered. A Valkey error is raised as it is: a Valkey outage, and the
runtime holds the message until Valkey answers.
"""

from __future__ import annotations

import random
import time
import uuid

import structlog
import valkey

from shared.llm.accounting import count_throttled

log = structlog.get_logger("agent_memory.llm")

KEY_PREFIX = "am:llm-calls:"
_JITTER_SECONDS = 0.05  # so waiters do not all ask again at the same instant

# KEYS[1]: the app's set. ARGV: the limit, the window in microseconds, a member id.
# Returns 0 when the call is admitted, else the microseconds until the window has room.
_ADMIT = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t - window)
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  redis.call('ZADD', KEYS[1], t, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000) + 1000)
  return 0
end
local freed = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
return math.max(1, tonumber(freed[2]) + window - t)
"""


class Throttle:
    """Admits the calls of each app within `limit` per `window_seconds`."""

    def __init__(self, client: valkey.Valkey, limit: int, window_seconds: float = 60.0) -> None:
        if limit < 1:
            raise ValueError("the limit is at least one call")
        self.limit = limit
        self.window_seconds = window_seconds
        self._window_us = max(1, round(window_seconds * 1_000_000))
        self._admit = client.register_script(_ADMIT)

    def admit(self, app: str, purpose: str) -> float:
        """Wait until a call for `app` may go and take its slot; the seconds waited."""
        started = time.monotonic()
        waited = False
        while True:
            member = uuid.uuid4().hex
            wait_us = int(
                self._admit(keys=[KEY_PREFIX + app], args=[self.limit, self._window_us, member])
            )
            if wait_us <= 0:
                break
            if not waited:
                log.debug("model call waits for the app's limit", app=app, purpose=purpose)
                waited = True
            # The one wait of this module: until the window has room for the call.
            time.sleep(wait_us / 1_000_000 + random.uniform(0, _JITTER_SECONDS))  # noqa: S311
        if not waited:
            return 0.0
        seconds = time.monotonic() - started
        count_throttled(app, purpose, seconds)
        return seconds
