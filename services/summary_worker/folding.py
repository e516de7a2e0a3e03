"""Summarize-before-trim: fold a session's oldest turns into its rolling summary.

When the buffer holds more than `trigger_turns` turns or `trigger_tokens`
tokens, every turn but the newest `window_turns` is folded, with the previous
summary, into a new summary by the LLM. Storing it and removing exactly those
turns is one Valkey script that first checks the summary is still at the
version the fold started from and that every folded turn is still there; if
another writer won, the fold starts again from a fresh read. So a turn leaves
the buffer only inside a stored summary version, and never in two.

A per-session lock keeps concurrent handlers of one session from paying for the
same LLM call twice. It is an optimisation only: the version check above is what
makes folding safe. It lives `lock_seconds` and its holder renews it while the
LLM works, so a crashed holder delays that session's folds by seconds, not by
the length of an LLM call.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from shared.config import Settings
from shared.events import utcnow
from shared.llm import LLM, DialogueTurn
from shared.metrics import SUMMARY_FOLDS
from shared.session_buffer import (
    FOLD_VERSION_MOVED,
    AppendResult,
    BufferedTurn,
    SessionBuffer,
    SessionKey,
)

log = structlog.get_logger("agent_memory.summary")


class FoldConflict(Exception):
    """Other writers kept winning; the message is retried later."""


@dataclass(frozen=True)
class FoldPolicy:
    trigger_turns: int = 10
    trigger_tokens: int = 4000
    window_turns: int = 4
    max_tokens: int = 600
    max_conflicts: int = 20
    lock_seconds: float = 10.0

    @classmethod
    def from_settings(cls, settings: Settings) -> FoldPolicy:
        return cls(
            trigger_turns=settings.summary_trigger_turns,
            trigger_tokens=settings.summary_trigger_tokens,
            window_turns=settings.summary_window_turns,
            max_tokens=settings.summary_max_tokens,
            max_conflicts=settings.summary_max_conflicts,
        )

    def due(self, turn_count: int, tokens: int) -> bool:
        return turn_count > self.trigger_turns or tokens > self.trigger_tokens

    def to_fold(self, turns: list[BufferedTurn]) -> list[BufferedTurn]:
        """The oldest turns beyond the newest `window_turns`."""
        return turns[: max(0, len(turns) - self.window_turns)]


class Folder:
    def __init__(self, buffer: SessionBuffer, llm: LLM, policy: FoldPolicy) -> None:
        self.buffer = buffer
        self.llm = llm
        self.policy = policy

    def fold_if_due(self, key: SessionKey, appended: AppendResult) -> list[int]:
        """Fold until the buffer is within its triggers; returns the versions stored.
        Raises (leaving the buffer as it was) if the LLM gives no usable summary."""
        stored: list[int] = []
        if not self.policy.due(appended.turn_count, appended.tokens):
            return stored
        while True:
            with self._fold_lock(key) as held:
                if not held:
                    # Another handler is folding this session; it checks again after
                    # releasing the lock, so turns appended meanwhile are not left over.
                    return stored
                stored += self._fold_while_due(key)
            view = self.buffer.read(key)
            if not self.policy.due(len(view.turns), view.tokens) or not self.policy.to_fold(
                view.turns
            ):
                return stored

    @contextmanager
    def _fold_lock(self, key: SessionKey) -> Iterator[bool]:
        """The session's fold lock, renewed every third of its life while held."""
        token = uuid.uuid4().hex
        seconds = self.policy.lock_seconds
        if not self.buffer.lock_folding(key, token, seconds):
            yield False
            return
        released = threading.Event()

        def renew() -> None:
            while not released.wait(seconds / 3):
                try:
                    if not self.buffer.renew_folding(key, token, seconds):
                        return
                except Exception as exc:  # the lock only saves work; folding goes on
                    log.warning("fold lock renewal failed", error=repr(exc))

        renewer = threading.Thread(target=renew, name="fold-lock", daemon=True)
        renewer.start()
        try:
            yield True
        finally:
            released.set()
            renewer.join()
            self.buffer.unlock_folding(key, token)

    def _fold_while_due(self, key: SessionKey) -> list[int]:
        stored: list[int] = []
        conflicts = 0
        while True:
            view = self.buffer.read(key)
            folded = self.policy.to_fold(view.turns)
            if not self.policy.due(len(view.turns), view.tokens) or not folded:
                return stored
            completion = self.llm.summarize(
                view.summary.text,
                [DialogueTurn(t.turn_id, t.created_at, t.user, t.assistant) for t in folded],
                self.policy.max_tokens,
            )
            version = self.buffer.store_fold(
                key, view.summary.version, completion.value, folded, utcnow()
            )
            if version > 0:
                SUMMARY_FOLDS.labels("stored").inc()
                log.info(
                    "summary folded",
                    session=key.session_id,
                    version=version,
                    turns=len(folded),
                    input_tokens=completion.usage.input_tokens,
                    output_tokens=completion.usage.output_tokens,
                )
                stored.append(version)
                continue
            SUMMARY_FOLDS.labels("conflict").inc()
            conflicts += 1
            reason = "version moved" if version == FOLD_VERSION_MOVED else "a turn was removed"
            log.info("summary fold lost a race", session=key.session_id, reason=reason)
            if conflicts >= self.policy.max_conflicts:
                raise FoldConflict(f"{conflicts} folds lost to other writers ({reason})")
