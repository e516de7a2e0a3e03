"""The session buffer in Valkey: a session's recent turns, ordered by their time.

Keys of one session share a hash tag (`am:{app:user:session}:…`), so they live
in one cluster slot and one script can touch them all atomically. Every write
refreshes an idle TTL on every key of the session.

Appending is idempotent by `turn_id`: the `seen` set remembers every turn ever
appended to the session, so a redelivered or replayed event is a no-op even
after its turn has been folded into the summary and trimmed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any
from urllib.parse import quote

import valkey

from shared.events import TurnRecorded, format_time, parse_time
from shared.tokens import estimate_tokens

_APPEND = """
-- KEYS: turns (zset), data (hash), seen (set), meta (hash)
-- ARGV: turn_id, score, turn json, tokens, ttl seconds
local ttl = tonumber(ARGV[5])
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then
  for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ttl) end
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HINCRBY', KEYS[4], 'turns_total', 1)
redis.call('HINCRBY', KEYS[4], 'tokens', tonumber(ARGV[4]))
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ttl) end
return 1
"""

_READ = """
-- KEYS: turns, data, meta. Returns {ids, data values, meta flat list}
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local data = {}
for i, id in ipairs(ids) do data[i] = redis.call('HGET', KEYS[2], id) end
return {ids, data, redis.call('HGETALL', KEYS[3])}
"""


def _part(value: str) -> str:
    # Escape the characters that structure the key, so ("a:b","c") != ("a","b:c").
    return quote(value, safe="")


@dataclass(frozen=True)
class SessionKey:
    app: str
    user_id: str
    session_id: str

    @cached_property
    def tag(self) -> str:
        return "{" + ":".join(_part(p) for p in (self.app, self.user_id, self.session_id)) + "}"

    def key(self, suffix: str) -> str:
        return f"am:{self.tag}:{suffix}"

    @cached_property
    def keys(self) -> list[str]:
        """Every key of the session, in the order the scripts expect."""
        return [self.key(s) for s in ("turns", "data", "seen", "meta")]


@dataclass(frozen=True)
class BufferedTurn:
    turn_id: str
    event_id: str
    created_at: datetime
    user: str
    assistant: str
    project_id: str
    tokens: int

    @classmethod
    def from_event(cls, event: TurnRecorded) -> BufferedTurn:
        return cls(
            turn_id=event.turn_id,
            event_id=event.event_id,
            created_at=event.created_at,
            user=event.user,
            assistant=event.assistant,
            project_id=event.project_id,
            tokens=estimate_tokens(event.user) + estimate_tokens(event.assistant),
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "turn_id": self.turn_id,
                "event_id": self.event_id,
                "created_at": format_time(self.created_at),
                "user": self.user,
                "assistant": self.assistant,
                "project_id": self.project_id,
                "tokens": self.tokens,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> BufferedTurn:
        d: dict[str, Any] = json.loads(raw)
        return cls(
            turn_id=d["turn_id"],
            event_id=d["event_id"],
            created_at=parse_time(d["created_at"]),
            user=d["user"],
            assistant=d["assistant"],
            project_id=d["project_id"],
            tokens=int(d["tokens"]),
        )


@dataclass(frozen=True)
class SessionView:
    turns: list[BufferedTurn]
    tokens: int
    turns_total: int  # every turn ever appended, trimmed ones included


def _score(created_at: datetime) -> float:
    # Microseconds since the epoch: exact in a double until the year 2255.
    return created_at.timestamp() * 1_000_000


class SessionBuffer:
    """Reads and writes session buffers through atomic scripts."""

    def __init__(self, client: valkey.Valkey, ttl_seconds: int) -> None:
        self.client = client
        self.ttl_seconds = ttl_seconds
        self._append = client.register_script(_APPEND)
        self._read = client.register_script(_READ)

    def append(self, key: SessionKey, turn: BufferedTurn) -> bool:
        """Put the turn in its place by time; False if this turn_id was seen before."""
        added = self._append(
            keys=key.keys,
            args=[
                turn.turn_id,
                _score(turn.created_at),
                turn.to_json(),
                turn.tokens,
                self.ttl_seconds,
            ],
        )
        return bool(added)

    def read(self, key: SessionKey) -> SessionView:
        turns_key, data_key, _seen, meta_key = key.keys
        ids, data, meta_flat = self._read(keys=[turns_key, data_key, meta_key])
        meta = {
            (k.decode() if isinstance(k, bytes) else k): v
            for k, v in zip(meta_flat[::2], meta_flat[1::2], strict=True)
        }
        turns = [BufferedTurn.from_json(raw) for raw in data if raw is not None]
        return SessionView(
            turns=turns,
            tokens=int(meta.get("tokens", 0)),
            turns_total=int(meta.get("turns_total", 0)),
        )

    def delete(self, key: SessionKey) -> int:
        return int(self.client.delete(*key.keys))

    def ttl(self, key: SessionKey) -> dict[str, int]:
        """Seconds to live of each key (for tests and operators)."""
        return {k: int(self.client.ttl(k)) for k in key.keys}
