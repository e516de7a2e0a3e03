"""What the blocking and the asyncio buffer share: the registered scripts, the
arguments each script takes and what its replies mean. The two clients add only
their I/O (a call, or an awaited call) on top."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from shared.events import parse_time
from shared.session_buffer.keys import SessionKey
from shared.session_buffer.model import AppendResult, BufferedTurn, SessionView, Summary
from shared.session_buffer.scripts import APPEND, FOLD, READ, RENEW, UNAPPEND, UNLOCK

SUMMARY_FIELDS = ["summary", "summary_version", "summary_updated_at"]


class BufferCore:
    """The client, the sessions' idle TTL, and every script registered on the client
    (registering computes the script's SHA locally; nothing is sent)."""

    def __init__(self, client: Any, ttl_seconds: int) -> None:
        self.client = client
        self.ttl_seconds = ttl_seconds
        self._append = client.register_script(APPEND)
        self._read = client.register_script(READ)
        self._fold = client.register_script(FOLD)
        self._unlock = client.register_script(UNLOCK)
        self._renew = client.register_script(RENEW)
        self._unappend = client.register_script(UNAPPEND)

    def _queue_append(
        self,
        pipe: Any,
        key: SessionKey,
        turn: BufferedTurn,
        prev_session_id: str,
        own_only: bool = False,
    ) -> None:
        """An append's two commands on a pipeline: the script, then the user's tombstone
        (read after it, on the same connection; see the package's notes). `own_only`
        refuses the turn when the session is another agent's."""
        args = _append_args(turn, prev_session_id, self.ttl_seconds, own_only)
        pipe.execute_command("EVALSHA", self._append.sha, len(key.keys), *key.keys, *args)
        pipe.get(key.tombstone)

    def _take_back(self, key: SessionKey, turn: BufferedTurn) -> Any:
        """Remove a turn of a deleted user again (the call, or its awaitable)."""
        return self._unappend(keys=key.keys, args=[turn.turn_id, turn.tokens])

    def _read_script(self, key: SessionKey, with_folds: bool) -> Any:
        """The read script without the fold lock (the call, or its awaitable)."""
        return self._read(keys=key.keys, args=read_args(with_folds))


def _score(created_at: datetime) -> float:
    # Microseconds since the epoch: exact in a double until the year 2255.
    return created_at.timestamp() * 1_000_000


def text_of(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def _flat_to_dict(flat: list) -> dict[str, bytes | str]:
    return {text_of(k): v for k, v in zip(flat[::2], flat[1::2], strict=True)}


def _append_args(
    turn: BufferedTurn, prev_session_id: str, ttl: int, own_only: bool
) -> list[object]:
    return [
        turn.turn_id,
        _score(turn.created_at),
        turn.to_json(),
        turn.tokens,
        ttl,
        prev_session_id,
        turn.project_id,
        turn.agent_id,
        "1" if own_only else "0",
    ]


def _is_dropped(turn: BufferedTurn, tombstone: bytes | str | None) -> bool:
    return tombstone is not None and turn.created_at.timestamp() <= float(tombstone)


def append_result(turn: BufferedTurn, reply: list, tombstone: Any) -> AppendResult:
    """What the append's two replies say; `dropped` asks the caller to take it back."""
    added, count, tokens = reply
    if int(added) < 0:  # nothing was appended, so nothing to take back either
        return AppendResult(False, int(count), int(tokens), other_agent=True)
    if _is_dropped(turn, tombstone):
        return AppendResult(False, 0, 0, dropped=True)
    return AppendResult(bool(added), int(count), int(tokens))


def read_args(with_folds: bool, lock_token: str = "", lock_ms: int = 0) -> list[object]:
    return ["1" if with_folds else "0", lock_token, lock_ms]


def view(found: list) -> SessionView | None:
    """The read script's reply; None if another holds the fold lock."""
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
        summary=summary([meta.get(name) for name in SUMMARY_FIELDS]),
        prev_session_id=text_of(meta.get("prev_session_id")),
        agent_id=text_of(meta["agent"]) if "agent" in meta else None,
        folds=dict(sorted(folds.items())),
    )


def unlocked_view(found: list) -> SessionView:
    """The reply of a read that took no lock: always a view."""
    found_view = view(found)
    assert found_view is not None
    return found_view


def summary(values: list) -> Summary:
    """A summary from its `meta` fields, in the order of SUMMARY_FIELDS."""
    text, version, updated = values
    return Summary(
        text=text_of(text),
        version=int(version or 0),
        updated_at=parse_time(text_of(updated)) if updated else None,
    )
