"""The workers' session buffer: a blocking client."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import valkey

from shared.events import format_time
from shared.session_buffer.core import BufferCore, append_result, read_args, unlocked_view, view
from shared.session_buffer.keys import SessionKey
from shared.session_buffer.model import AppendResult, BufferedTurn, FoldResult, SessionView
from shared.session_buffer.scripts import APPEND


class SessionBuffer(BufferCore):
    """Reads and writes session buffers through atomic scripts."""

    client: valkey.Valkey

    def append(
        self, key: SessionKey, turn: BufferedTurn, prev_session_id: str = ""
    ) -> AppendResult:
        """Put the turn in its place by time, unless this turn_id was seen before.

        The user's tombstone is read in the same round trip, after the append: a
        turn created before its user's deletion is removed again with its session
        (see the package's notes on deleted users)."""
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
                self._queue_append(pipe, *appends[i])
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
            self.client.script_load(APPEND)  # Valkey restarted and lost its scripts
            todo = lost_script
        return results  # type: ignore[return-value]  # the loop filled every slot

    def _applied(
        self, append: tuple[SessionKey, BufferedTurn, str], reply: list, tombstone: Any
    ) -> AppendResult:
        key, turn, _prev = append
        result = append_result(turn, reply, tombstone)
        if result.dropped:
            self._take_back(key, turn)
        return result

    def read(self, key: SessionKey, with_folds: bool = False) -> SessionView:
        return unlocked_view(self._read_script(key, with_folds))

    def lock_and_read(self, key: SessionKey, token: str, seconds: float) -> SessionView | None:
        """Take the session's fold lock and read the session in one step; None if
        another holds the lock. The lock is an optimisation that spares duplicate
        LLM calls by concurrent handlers: correctness rests on `store_fold`."""
        args = read_args(False, token, int(seconds * 1000))
        return view(self._read(keys=key.keys, args=args))

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
        # valkey types the blocking and asyncio clients' answers as one union.
        ttls = {k: int(self.client.ttl(k)) for k in key.keys}  # type: ignore[arg-type]
        return {k: ttl for k, ttl in ttls.items() if ttl != -2}
