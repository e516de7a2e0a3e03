"""Every answer the API gave a burst, as its client saw it on the wire: the client
retries a 503 itself (after its `Retry-After`), so the refusals a turn met do not
all reach the caller. Recorded by a transport wrapped around httpx's own."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from shared.client import MemoryClient


@dataclass(frozen=True, slots=True)
class Answer:
    turn_id: str
    sent: float  # time.monotonic() when the request went out
    answered: float  # ... and when its answer came
    status: int  # 0: no answer (a transport error)
    code: str  # the API's error code, "" for a success
    retry_after: float | None

    @property
    def seconds(self) -> float:
        return self.answered - self.sent


class AnswerLog(httpx.BaseTransport):
    """httpx's transport, noting each answer to a recorded turn."""

    def __init__(self) -> None:
        # One pool for every sender thread's client.
        self._inner = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=64))
        self._lock = threading.Lock()
        self.answers: list[Answer] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        sent = time.monotonic()
        turn_id = _turn_id(request)
        try:
            response = self._inner.handle_request(request)
        except httpx.TransportError:
            self._note(Answer(turn_id, sent, time.monotonic(), 0, "no answer", None))
            raise
        code = ""
        if response.status_code >= 400:
            response.read()  # small; the client reads it again from memory
            code = _error_code(response)
        header = response.headers.get("retry-after")
        retry_after = float(header) if header and header.isdigit() else None
        self._note(Answer(turn_id, sent, time.monotonic(), response.status_code, code, retry_after))
        return response

    def close(self) -> None:
        """Each client closes its transport when its thread is done: the pool stays
        for the others, until `shutdown`."""

    def shutdown(self) -> None:
        self._inner.close()

    def _note(self, answer: Answer) -> None:
        if answer.turn_id:
            with self._lock:
                self.answers.append(answer)

    def client_factory(self, url: str, api_key: str) -> Callable[[], MemoryClient]:
        """Clients of the API at `url` that send through this log (timeout as the
        stack's own: longer than the API's publish timeout)."""
        return lambda: MemoryClient(url, api_key=api_key, timeout=15.0, transport=self)

    # what the answers show ------------------------------------------------------
    def refusals(self) -> Counter[str]:
        """'503 overloaded retry-after 1' and the like -> how many."""
        found: Counter[str] = Counter()
        for a in self.answers:
            if a.status >= 400 or a.status == 0:
                hint = "" if a.retry_after is None else f" retry-after {a.retry_after:g}"
                found[f"{a.status} {a.code}{hint}"] += 1
        return found

    def early_retries(self) -> int:
        """Attempts of a turn sent before the `Retry-After` of its previous refusal."""
        by_turn: dict[str, list[Answer]] = {}
        for a in sorted(self.answers, key=lambda a: a.sent):
            by_turn.setdefault(a.turn_id, []).append(a)
        early = 0
        for attempts in by_turn.values():
            for before, after in zip(attempts, attempts[1:], strict=False):
                if before.retry_after is not None:
                    early += after.sent < before.answered + before.retry_after
        return early

    def seconds(self, accepted: bool) -> list[float]:
        """How long each answer that accepted a turn (202) took, or each other answer."""
        return sorted(a.seconds for a in self.answers if a.status and (a.status < 400) == accepted)

    def latencies(self, accepted: bool) -> str:
        """p50, p99 and max of `seconds(accepted)`."""
        picked = self.seconds(accepted)
        if not picked:
            return "none"
        return (
            f"{len(picked)} answers, p50 {statistics.median(picked) * 1000:.0f} ms,"
            f" p99 {p99(picked) * 1000:.0f} ms, max {picked[-1] * 1000:.0f} ms"
        )

    def slowest(self) -> float:
        return max((a.seconds for a in self.answers if a.status), default=0.0)


def p99(ordered: list[float]) -> float:
    return ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0


def _turn_id(request: httpx.Request) -> str:
    if request.method != "POST" or not request.url.path.endswith("/turns"):
        return ""
    try:
        return str(json.loads(request.content).get("turn_id", ""))
    except ValueError:
        return ""


def _error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "unreadable"
