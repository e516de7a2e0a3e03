"""Summarize-before-trim: fold a session's oldest turns into its rolling summary.

When the buffer holds more than `trigger_turns` turns or `trigger_tokens`
tokens, every turn but the newest `kept_turns` is folded, with the previous
summary, into a new summary by the LLM. Storing it and removing exactly those
turns is one Valkey script that first checks the summary is still at the
version the fold started from and that every folded turn is still there; if
another writer won, the fold starts again from a fresh read. So a turn leaves
the buffer only inside a stored summary version, and never in two.

A per-session lock keeps concurrent handlers of one session from paying for the
same LLM call twice. It is an optimisation only: the version check above is what
makes folding safe. It lives `lock_seconds` and its holder renews it while the
LLM works. A handler that finds the lock taken leaves the fold to the holder,
which checks again when it releases the lock; in case the holder died holding
it, the handler's process also looks at the session again once the lock has
run out. So a crashed holder delays that session's folds by seconds, not until
its next turn. One thread per process does the renewing, another the looking
again.
"""

from __future__ import annotations

import threading
import time
import uuid
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
    SessionView,
)

log = structlog.get_logger("agent_memory.summary")


class FoldConflict(Exception):
    """Other writers kept winning; the message is retried later."""


@dataclass(frozen=True)
class FoldPolicy:
    trigger_turns: int = 10
    trigger_tokens: int = 4000
    kept_turns: int = 4
    max_tokens: int = 600
    max_conflicts: int = 20
    lock_seconds: float = 10.0

    @classmethod
    def from_settings(cls, settings: Settings) -> FoldPolicy:
        return cls(
            trigger_turns=settings.summary_trigger_turns,
            trigger_tokens=settings.summary_trigger_tokens,
            kept_turns=settings.summary_kept_turns,
            max_tokens=settings.summary_max_tokens,
            max_conflicts=settings.summary_max_conflicts,
        )

    def due(self, turn_count: int, tokens: int) -> bool:
        return turn_count > self.trigger_turns or tokens > self.trigger_tokens

    def foldable(self, turn_count: int, tokens: int) -> bool:
        """Over a trigger, with turns beyond the kept ones to fold."""
        return self.due(turn_count, tokens) and turn_count > self.kept_turns

    def to_fold(self, turns: list[BufferedTurn]) -> list[BufferedTurn]:
        """The oldest turns beyond the newest `kept_turns`."""
        return turns[: max(0, len(turns) - self.kept_turns)]


class Folder:
    def __init__(self, buffer: SessionBuffer, llm: LLM, policy: FoldPolicy) -> None:
        self.buffer = buffer
        self.llm = llm
        self.policy = policy
        self._held: set[tuple[SessionKey, str]] = set()  # fold locks this process holds
        self._held_lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        # Sessions whose lock was taken, and when to look at them again.
        self._rechecks: dict[SessionKey, float] = {}
        self._rechecker: threading.Thread | None = None

    def fold_if_due(self, key: SessionKey, appended: AppendResult) -> list[int]:
        """Fold until the buffer is within its triggers; returns the versions stored.
        Raises (leaving the buffer as it was) if the LLM gives no usable summary."""
        stored: list[int] = []
        count, tokens = appended.turn_count, appended.tokens
        while self.policy.foldable(count, tokens):
            token = uuid.uuid4().hex
            view = self.buffer.lock_and_read(key, token, self.policy.lock_seconds)
            if view is None:
                # Another handler is folding this session; it checks again after
                # releasing the lock, so turns appended meanwhile are not left over.
                self._recheck_later(key)
                return stored
            self._hold(key, token)
            try:
                folded = self._fold_while_due(key, view)
            finally:
                self._release(key, token)
                count, tokens = self.buffer.unlock_folding(key, token)
            stored += folded
            if not folded:
                return stored  # nothing to do after all: never spin
        return stored

    def _fold_while_due(self, key: SessionKey, view: SessionView) -> list[int]:
        stored: list[int] = []
        conflicts = 0
        while self.policy.foldable(len(view.turns), view.tokens):
            folded = self.policy.to_fold(view.turns)
            completion = self.llm.summarize(
                view.summary.text,
                [DialogueTurn(t.turn_id, t.created_at, t.user, t.assistant) for t in folded],
                self.policy.max_tokens,
            )
            result = self.buffer.store_fold(
                key, view.summary.version, completion.value, folded, utcnow()
            )
            if result.version > 0:
                SUMMARY_FOLDS.labels("stored").inc()
                log.info(
                    "summary folded",
                    session=key.session_id,
                    version=result.version,
                    turns=len(folded),
                    input_tokens=completion.usage.input_tokens,
                    output_tokens=completion.usage.output_tokens,
                )
                stored.append(result.version)
                if not self.policy.foldable(result.turn_count, result.tokens):
                    return stored
            else:
                SUMMARY_FOLDS.labels("conflict").inc()
                conflicts += 1
                reason = (
                    "version moved"
                    if result.version == FOLD_VERSION_MOVED
                    else "a turn was removed"
                )
                log.info("summary fold lost a race", session=key.session_id, reason=reason)
                if conflicts >= self.policy.max_conflicts:
                    raise FoldConflict(f"{conflicts} folds lost to other writers ({reason})")
            view = self.buffer.read(key)
        return stored

    def _hold(self, key: SessionKey, token: str) -> None:
        with self._held_lock:
            self._held.add((key, token))
            if self._renewer is None:
                self._renewer = threading.Thread(
                    target=self._renew_forever, name="fold-lock-renewer", daemon=True
                )
                self._renewer.start()

    def _release(self, key: SessionKey, token: str) -> None:
        with self._held_lock:
            self._held.discard((key, token))

    def _recheck_later(self, key: SessionKey) -> None:
        """Look at the session again once the lock that was taken has run out: if
        its holder died, nothing else would fold the session before its next turn."""
        with self._held_lock:
            self._rechecks.setdefault(key, time.monotonic() + self.policy.lock_seconds)
            if self._rechecker is None:
                self._rechecker = threading.Thread(
                    target=self._recheck_forever, name="fold-rechecker", daemon=True
                )
                self._rechecker.start()

    def _recheck_forever(self) -> None:
        while True:
            time.sleep(self.policy.lock_seconds / 3)
            now = time.monotonic()
            with self._held_lock:
                due = [key for key, at in self._rechecks.items() if at <= now]
                for key in due:
                    del self._rechecks[key]
            for key in due:
                try:
                    view = self.buffer.read(key)
                    # A live holder still folding makes this schedule another look.
                    self.fold_if_due(key, AppendResult(False, len(view.turns), view.tokens))
                except Exception as exc:  # the session's next turn tries again
                    log.warning("fold re-check failed", session=key.session_id, error=repr(exc))

    def _renew_forever(self) -> None:
        """One thread per process renews every held fold lock each third of its life."""
        while True:
            time.sleep(self.policy.lock_seconds / 3)
            with self._held_lock:
                held = list(self._held)
            for key, token in held:
                try:
                    self.buffer.renew_folding(key, token, self.policy.lock_seconds)
                except Exception as exc:  # the lock only saves work; folding goes on
                    log.warning("fold lock renewal failed", error=repr(exc))
