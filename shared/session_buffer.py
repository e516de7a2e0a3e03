"""The session buffer in Valkey: a session's recent turns, ordered by their time,
and its rolling summary.

Keys of one session share a hash tag (`am:{app:user:session}:…`), so they live
in one cluster slot and one script can touch them all atomically. Every write
refreshes an idle TTL on every key of the session.

Appending is idempotent by `turn_id`: the `seen` set remembers every turn ever
appended to the session, so a redelivered or replayed event is a no-op even
after its turn has been folded into the summary and trimmed. A fold (the
summary worker's summarize-before-trim) is stored by one script that checks the
summary's version and the folded turns first, so a turn leaves the buffer only
inside exactly one summary version; `folds` records which.

Deleted users (GDPR): the deletion sets the user's tombstone key, then removes
every key of the user (SCAN). An append reads the tombstone in the same round
trip, after its script (one pipeline on one connection runs in order). If the
tombstone was not there yet, the append ran before the sweep, which removes
it; if it was, the appender takes the turn back itself when it predates the
deletion (and the session's keys, if nothing else is in it: a user may come
back after a deletion, and their new turns stay). The order argument needs the
session and tombstone keys on one primary, as with a standalone Valkey or Redis.

`SessionBuffer` is the blocking client of the workers; `AsyncSessionBuffer` the
API's, on the event loop. Both run the same scripts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any
from urllib.parse import quote

import orjson
import valkey
import valkey.asyncio

from shared.events import TurnRecorded, format_time, parse_time
from shared.tokens import estimate_tokens

# Keys of a session, in the order every script takes them.
_SUFFIXES = ("turns", "data", "seen", "meta", "folds", "fold-lock")

# How full the buffer is: {turns in it, their tokens}. Shared by the scripts below.
_FILL = """
local function fill(turns_key, meta_key)
  return {redis.call('ZCARD', turns_key), tonumber(redis.call('HGET', meta_key, 'tokens') or '0')}
end
"""

_APPEND = (
    _FILL
    + """
-- KEYS: turns (zset), data (hash), seen (set), meta (hash), folds, fold-lock
-- ARGV: turn_id, score, turn json, tokens, ttl seconds, prev_session_id, project_id
-- Returns {added 0|1, turns in the buffer, tokens in the buffer}
-- meta also marks every project the session's turns belonged to ('project:<id>'),
-- so deleting a project finds its sessions.
local ttl = tonumber(ARGV[5])
local added = 0
if redis.call('SADD', KEYS[3], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  redis.call('HINCRBY', KEYS[4], 'tokens', tonumber(ARGV[4]))
  if ARGV[6] ~= '' then redis.call('HSETNX', KEYS[4], 'prev_session_id', ARGV[6]) end
  if ARGV[7] ~= '' then redis.call('HSET', KEYS[4], 'project:' .. ARGV[7], '1') end
  added = 1
end
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ttl) end
local now = fill(KEYS[1], KEYS[4])
return {added, now[1], now[2]}
"""
)

_READ = """
-- KEYS: turns, data, seen, meta, folds, fold-lock
-- ARGV: 1 to include the folds; a fold-lock token to take the lock first ('' for
--       none); the lock's life in ms.
-- Returns {0} if the lock is taken by another, else {1, the turns in order, turns
-- ever appended, meta flat list, folds flat list}
if ARGV[2] ~= '' then
  -- Already ours: the client retried this call after a dropped connection.
  if not redis.call('SET', KEYS[6], ARGV[2], 'NX', 'PX', ARGV[3])
     and redis.call('GET', KEYS[6]) ~= ARGV[2] then
    return {0}
  end
end
-- The turns' data by HMGET, in slices (unpack's limit is some thousands of
-- values): one HGET per turn was a sixth of the script's time.
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local turns = {}
for first = 1, #ids, 1000 do
  local got = redis.call('HMGET', KEYS[2], unpack(ids, first, math.min(first + 999, #ids)))
  for i = 1, #got do turns[first + i - 1] = got[i] end
end
local folds = {}
if ARGV[1] == '1' then folds = redis.call('HGETALL', KEYS[5]) end
return {1, turns, redis.call('SCARD', KEYS[3]), redis.call('HGETALL', KEYS[4]), folds}
"""

_FOLD = (
    _FILL
    + """
-- KEYS: turns, data, seen, meta, folds, fold-lock
-- ARGV: expected summary version, summary, updated_at, ttl, folded tokens, then
--       the folded turn ids.
-- Stores the new summary and removes exactly the folded turns, or nothing.
-- Returns {new version, or -1 if the version moved, -2 if a turn is gone;
--          turns in the buffer; their tokens}
local function result(code)
  local now = fill(KEYS[1], KEYS[4])
  return {code, now[1], now[2]}
end
local version = tonumber(redis.call('HGET', KEYS[4], 'summary_version') or '0')
if version ~= tonumber(ARGV[1]) then return result(-1) end
local folded = {}
for i = 6, #ARGV do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then return result(-2) end
  folded[#folded + 1] = ARGV[i]
end
redis.call('ZREM', KEYS[1], unpack(folded))
redis.call('HDEL', KEYS[2], unpack(folded))
version = version + 1
redis.call('HSET', KEYS[4], 'summary', ARGV[2], 'summary_version', version,
           'summary_updated_at', ARGV[3])
redis.call('HINCRBY', KEYS[4], 'tokens', -tonumber(ARGV[5]))
redis.call('HSET', KEYS[5], version, cjson.encode(folded))
local ttl = tonumber(ARGV[4])
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ttl) end
return result(version)
"""
)

_UNAPPEND = """
-- KEYS: turns, data, seen, meta, folds, fold-lock. ARGV: turn_id, its tokens.
-- Takes back a turn of a deleted user (created before the deletion): the turn
-- leaves the buffer and the seen set; a session left with nothing (no turn, no
-- summary) loses its keys.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HINCRBY', KEYS[4], 'tokens', -tonumber(ARGV[2]))
end
redis.call('SREM', KEYS[3], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 and not redis.call('HGET', KEYS[4], 'summary') then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
end
return 1
"""

_UNLOCK = (
    _FILL
    + """
-- KEYS: fold-lock, turns, meta. ARGV: token. Releases the lock if the token holds
-- it; returns {turns in the buffer, their tokens}.
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return fill(KEYS[2], KEYS[3])
"""
)

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

FOLD_VERSION_MOVED = -1
FOLD_TURN_GONE = -2


def _part(value: str) -> str:
    # Escape the characters that structure the key, so ("a:b","c") != ("a","b:c").
    return quote(value, safe="")


# A deleted user's tombstone: when the deletion happened (epoch seconds). It has no
# TTL (so no eviction policy takes it either): a dead letter can be replayed at any
# time, and the summary path has no other record of the deletion.


def tombstone_key(app: str, user_id: str) -> str:
    return f"am:deleted:{{{_part(app)}:{_part(user_id)}}}"


def user_keys_pattern(app: str, user_id: str) -> str:
    """SCAN pattern of every session (and grant) key of one user. The escaped
    parts hold no glob characters (`quote` encodes * ? [ ])."""
    return f"am:{{{_part(app)}:{_part(user_id)}:*"


def meta_key_of(key: str) -> str:
    """The `meta` key of the session that `key` (any key of a session) belongs to:
    its hash tag ends at the first `}` (the escaped parts hold none)."""
    return f"{key[: key.index('}') + 1]}:meta"


def project_marker(project_id: str) -> str:
    """The `meta` field that says a session had a turn of this project."""
    return f"project:{project_id}"


def _is_dropped(turn: BufferedTurn, tombstone: bytes | str | None) -> bool:
    return tombstone is not None and turn.created_at.timestamp() <= float(tombstone)


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
    def tombstone(self) -> str:
        return tombstone_key(self.app, self.user_id)

    @cached_property
    def keys(self) -> list[str]:
        """Every key of the session, in the order the scripts expect."""
        return [self.key(s) for s in _SUFFIXES]


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
        d: dict[str, Any] = orjson.loads(raw)
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
class Summary:
    """The session's rolling summary; version 0 means none yet."""

    text: str = ""
    version: int = 0
    updated_at: datetime | None = None

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


@dataclass(frozen=True)
class SessionView:
    turns: list[BufferedTurn]
    tokens: int  # of the turns in the buffer
    turns_total: int  # every turn ever appended (the `seen` set), folded ones included
    summary: Summary
    prev_session_id: str = ""
    # Summary version -> the turn_ids folded into that version (read on request).
    folds: dict[int, list[str]] = field(default_factory=dict)

    @property
    def folded_total(self) -> int:
        """Turns folded into the summary: every turn leaves the buffer only by a fold."""
        return self.turns_total - len(self.turns)


@dataclass(frozen=True)
class FoldResult:
    version: int  # the new summary version, or FOLD_VERSION_MOVED / FOLD_TURN_GONE
    turn_count: int  # turns in the buffer after the attempt
    tokens: int  # their tokens


@dataclass(frozen=True)
class AppendResult:
    added: bool  # False: this turn_id was appended before (now in the buffer or folded)
    turn_count: int  # turns in the buffer after the append
    tokens: int  # their tokens
    # The user was deleted (GDPR) after this turn was created: the session's keys
    # were removed again and nothing is kept.
    dropped: bool = False


def _score(created_at: datetime) -> float:
    # Microseconds since the epoch: exact in a double until the year 2255.
    return created_at.timestamp() * 1_000_000


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def _flat_to_dict(flat: list) -> dict[str, bytes | str]:
    return {_text(k): v for k, v in zip(flat[::2], flat[1::2], strict=True)}


_SUMMARY_FIELDS = ["summary", "summary_version", "summary_updated_at"]


def _append_args(turn: BufferedTurn, prev_session_id: str, ttl: int) -> list[object]:
    return [
        turn.turn_id,
        _score(turn.created_at),
        turn.to_json(),
        turn.tokens,
        ttl,
        prev_session_id,
        turn.project_id,
    ]


def _queue_append(
    pipe: Any, sha: str, key: SessionKey, turn: BufferedTurn, prev_session_id: str, ttl: int
) -> None:
    """An append's two commands on a pipeline: the script, then the user's tombstone
    (read after it, on the same connection; see the module's notes)."""
    args = _append_args(turn, prev_session_id, ttl)
    pipe.execute_command("EVALSHA", sha, len(key.keys), *key.keys, *args)
    pipe.get(key.tombstone)


def _append_result(turn: BufferedTurn, reply: list, tombstone: Any) -> AppendResult:
    """What the append's two replies say; `dropped` asks the caller to take it back."""
    if _is_dropped(turn, tombstone):
        return AppendResult(False, 0, 0, dropped=True)
    added, count, tokens = reply
    return AppendResult(bool(added), int(count), int(tokens))


def _read_args(with_folds: bool, lock_token: str = "", lock_ms: int = 0) -> list[object]:
    return ["1" if with_folds else "0", lock_token, lock_ms]


def _view(found: list) -> SessionView | None:
    if not found[0]:
        return None
    _ok, data, turns_total, meta_flat, folds_flat = found
    meta = _flat_to_dict(meta_flat)
    folds = {
        int(version): json.loads(turn_ids)
        for version, turn_ids in _flat_to_dict(folds_flat).items()
    }
    return SessionView(
        turns=[BufferedTurn.from_json(raw) for raw in data if raw is not None],
        tokens=int(meta.get("tokens", 0)),
        turns_total=int(turns_total),
        summary=_summary([meta.get(name) for name in _SUMMARY_FIELDS]),
        prev_session_id=_text(meta.get("prev_session_id")),
        folds=dict(sorted(folds.items())),
    )


def _summary(values: list) -> Summary:
    text, version, updated = values
    return Summary(
        text=_text(text),
        version=int(version or 0),
        updated_at=parse_time(_text(updated)) if updated else None,
    )


class SessionBuffer:
    """Reads and writes session buffers through atomic scripts."""

    def __init__(self, client: valkey.Valkey, ttl_seconds: int) -> None:
        self.client = client
        self.ttl_seconds = ttl_seconds
        self._append = client.register_script(_APPEND)
        self._read = client.register_script(_READ)
        self._fold = client.register_script(_FOLD)
        self._unlock = client.register_script(_UNLOCK)
        self._renew = client.register_script(_RENEW)
        self._unappend = client.register_script(_UNAPPEND)

    def append(
        self, key: SessionKey, turn: BufferedTurn, prev_session_id: str = ""
    ) -> AppendResult:
        """Put the turn in its place by time, unless this turn_id was seen before.

        The user's tombstone is read in the same round trip, after the append: a
        turn created before its user's deletion is removed again with its session
        (see the module's notes on deleted users)."""
        result = self.append_many([(key, turn, prev_session_id)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def append_many(
        self, appends: list[tuple[SessionKey, BufferedTurn, str]]
    ) -> list[AppendResult | Exception]:
        """`append` for many turns in one pipeline (one round trip), in order; for
        each, its result or the error it alone failed with. An error of the
        connection raises: then none is known to be applied."""
        results: list[AppendResult | Exception | None] = [None] * len(appends)
        todo = list(range(len(appends)))
        for attempt in (1, 2):
            pipe = self.client.pipeline(transaction=False)
            for i in todo:
                _queue_append(pipe, self._append.sha, *appends[i], self.ttl_seconds)
            replies = pipe.execute(raise_on_error=False)
            lost_script = []
            for n, i in enumerate(todo):
                appended, tombstone = replies[2 * n], replies[2 * n + 1]
                if isinstance(appended, valkey.exceptions.NoScriptError) and attempt == 1:
                    lost_script.append(i)
                elif isinstance(appended, Exception):
                    results[i] = appended
                elif isinstance(tombstone, Exception):
                    results[i] = tombstone
                else:
                    try:
                        results[i] = self._applied(appends[i], appended, tombstone)
                    except Exception as exc:  # this turn's alone (a bad tombstone value, ...)
                        results[i] = exc
            if not lost_script:
                break
            self.client.script_load(_APPEND)  # Valkey restarted and lost its scripts
            todo = lost_script
        return results  # type: ignore[return-value]

    def _applied(
        self, append: tuple[SessionKey, BufferedTurn, str], reply: list, tombstone: Any
    ) -> AppendResult:
        key, turn, _prev = append
        result = _append_result(turn, reply, tombstone)
        if result.dropped:
            self._unappend(keys=key.keys, args=[turn.turn_id, turn.tokens])
        return result

    def read(self, key: SessionKey, with_folds: bool = False) -> SessionView:
        view = _view(self._read(keys=key.keys, args=_read_args(with_folds)))
        assert view is not None
        return view

    def lock_and_read(self, key: SessionKey, token: str, seconds: float) -> SessionView | None:
        """Take the session's fold lock and read the session in one step; None if
        another holds the lock. The lock is an optimisation that spares duplicate
        LLM calls by concurrent handlers: correctness rests on `store_fold`."""
        args = _read_args(False, token, int(seconds * 1000))
        return _view(self._read(keys=key.keys, args=args))

    def store_fold(
        self,
        key: SessionKey,
        expected_version: int,
        summary: str,
        folded: list[BufferedTurn],
        updated_at: datetime,
    ) -> FoldResult:
        """Store `summary` as the next version and remove exactly the `folded` turns, in
        one step, if the summary is still at `expected_version` and every folded turn
        is still in the buffer. The result's version is the new one or a FOLD_* code."""
        version, count, tokens = self._fold(
            keys=key.keys,
            args=[
                expected_version,
                summary,
                format_time(updated_at),
                self.ttl_seconds,
                sum(t.tokens for t in folded),
                *(t.turn_id for t in folded),
            ],
        )
        return FoldResult(int(version), int(count), int(tokens))

    def renew_folding(self, key: SessionKey, token: str, seconds: float) -> bool:
        """Extend the fold lock if `token` still holds it."""
        return bool(self._renew(keys=[key.key("fold-lock")], args=[token, int(seconds * 1000)]))

    def unlock_folding(self, key: SessionKey, token: str) -> tuple[int, int]:
        """Release the fold lock if `token` holds it; returns (turns, tokens) now."""
        count, tokens = self._unlock(
            keys=[key.key("fold-lock"), key.key("turns"), key.key("meta")], args=[token]
        )
        return int(count), int(tokens)

    def ttl(self, key: SessionKey) -> dict[str, int]:
        """Seconds to live of each existing key (for tests and operators)."""
        ttls = {k: int(self.client.ttl(k)) for k in key.keys}
        return {k: ttl for k, ttl in ttls.items() if ttl != -2}


class AsyncSessionBuffer:
    """The API's side of the buffer on an asyncio client: appends and reads run
    on the event loop, with no thread hop. Same scripts, same results."""

    def __init__(self, client: valkey.asyncio.Valkey, ttl_seconds: int) -> None:
        self.client = client
        self.ttl_seconds = ttl_seconds
        self._append = client.register_script(_APPEND)
        self._read = client.register_script(_READ)
        self._unappend = client.register_script(_UNAPPEND)

    async def append(
        self, key: SessionKey, turn: BufferedTurn, prev_session_id: str = ""
    ) -> AppendResult:
        for attempt in (1, 2):
            pipe = self.client.pipeline(transaction=False)
            _queue_append(pipe, self._append.sha, key, turn, prev_session_id, self.ttl_seconds)
            try:
                reply, tombstone = await pipe.execute()
                break
            except valkey.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                await self.client.script_load(_APPEND)
        result = _append_result(turn, reply, tombstone)
        if result.dropped:
            await self._unappend(keys=key.keys, args=[turn.turn_id, turn.tokens])
        return result

    async def read(self, key: SessionKey, with_folds: bool = False) -> SessionView:
        view = _view(await self._read(keys=key.keys, args=_read_args(with_folds)))
        assert view is not None
        return view

    async def read_summary(self, key: SessionKey) -> Summary:
        return _summary(await self.client.hmget(key.key("meta"), _SUMMARY_FIELDS))

    async def delete(self, key: SessionKey) -> int:
        """Remove the session's short-term memory: every key. Returns keys removed."""
        return int(await self.client.delete(*key.keys))
