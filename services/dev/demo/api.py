"""The demo's side of the wire: the HTTP API with the stack's development key,
waiting by polling with a deadline, the PASS/FAIL checks, and the workers' token
counters read from their Prometheus endpoints."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import httpx

from shared.waiting import poll

T = TypeVar("T")
DEADLINE_SECONDS = 90.0


class DemoError(Exception):
    """The API answered something the demo did not expect."""


@dataclass
class Check:
    name: str
    passed: bool
    expected: str
    seen: str

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        text = f"  {verdict}  {self.name}"
        if not self.passed:
            text += f"\n        expected: {self.expected}\n        seen:     {self.seen}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(name: str, passed: bool, expected: str, seen: object) -> Check:
    return Check(name, bool(passed), expected, str(seen)[:500])


class Api:
    """`/v1` calls with the key; an unexpected status is a `DemoError` with the body."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.http = httpx.Client(
            base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}
        )

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, expect: int = 200, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        if response.status_code != expect:
            raise DemoError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def timed(self, method: str, path: str, **kwargs: Any) -> tuple[Any, float]:
        """The answer and how long it took, in milliseconds."""
        started = time.perf_counter()
        answer = self.call(method, path, **kwargs)
        return answer, (time.perf_counter() - started) * 1000

    def record(self, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", f"/v1/sessions/{session_id}/turns", 202, json=body)

    def flush(self, session_id: str, user_id: str) -> dict[str, Any]:
        """The session is over: its turns' memories are extracted now."""
        return self.call("POST", f"/v1/sessions/{session_id}:flush", 202, json={"user_id": user_id})

    def context(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "/v1/context", json=body)

    def memories(self, user_id: str, **params: str) -> list[dict[str, Any]]:
        page = self.call("GET", "/v1/memories", params={"user_id": user_id, "limit": 500, **params})
        return page["memories"]


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = DEADLINE_SECONDS) -> T:
    found = poll(probe, timeout, what, interval=0.1)
    assert found is not None  # poll returns a truthy value or raises
    return found


_SAMPLE = re.compile(r"^agent_memory_llm_tokens_total\{([^}]*)\} ([0-9.e+]+)$", re.MULTILINE)


def llm_tokens(metrics_urls: dict[str, str]) -> dict[str, int]:
    """Tokens every LLM task of each process has counted so far (input and output, all
    tasks; the provider interface counts them, whichever provider answered)."""
    found: dict[str, int] = {}
    for name, url in metrics_urls.items():
        text = httpx.get(url, timeout=5).text
        found[name] = round(sum(float(value) for _labels, value in _SAMPLE.findall(text)))
    return found
