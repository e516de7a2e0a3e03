"""One API call as data, how its answer is read, and when it may be sent again.

Both clients (`sync.MemoryClient`, `aio.AsyncMemoryClient`) send the same `Call`
objects and read the answers with the same `finish`; only the waiting (blocking
or awaited) differs between them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import ValidationError

from shared.client.errors import (
    MemoryApiError,
    MemoryConnectionError,
    OperationTimeoutError,
    api_error,
)

T = TypeVar("T")

# Statuses that say "not now" rather than "not this": worth another attempt.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Failures before the request was written: nothing reached the server, so even a
# call that is not safe to repeat (a write) may be sent again.
UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

USER_AGENT = "agent-memory-client/0.1"


def client_headers(api_key: str | None) -> dict[str, str]:
    """Headers of every request: the key as a bearer token when there is one."""
    headers = {"User-Agent": USER_AGENT}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


@dataclass(frozen=True)
class Call(Generic[T]):
    """A request and how to read its answer.

    `retry_safe`: sending it twice has the effect of sending it once (reads,
    deletes, a turn with its turn_id). `accept`: error statuses whose body is the
    answer (`/readyz` answers 503 with what is down). `read_allowance`: seconds
    the server may hold the answer on purpose (`memories:generate` with wait),
    added to the client's read timeout.
    """

    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] | None = None
    json: dict[str, Any] | None = None
    retry_safe: bool = False
    accept: frozenset[int] = field(default_factory=frozenset)
    read_allowance: float = 0.0

    def request_args(self, timeout: float) -> dict[str, Any]:
        """Keyword arguments of `httpx.Client.request` (and of the async one)."""
        args: dict[str, Any] = {"method": self.method, "url": self.path}
        if self.params:
            args["params"] = self.params
        if self.json is not None:
            args["json"] = self.json
        if self.read_allowance:
            args["timeout"] = httpx.Timeout(timeout, read=timeout + self.read_allowance)
        return args

    def finish(self, response: httpx.Response) -> T:
        """The typed answer, or the typed exception of an error answer."""
        status = response.status_code
        if not (response.is_success or status in self.accept):
            raise api_error(response)
        try:
            return self.parse(response.json())
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            # ValidationError is a ValueError; named for the reader.
            raise MemoryApiError(
                status,
                "invalid_response",
                f"{self.method} {self.path}: the answer is not what this client expects: {exc}",
            ) from exc

    def unreachable(self, error: httpx.TransportError, attempts: int) -> MemoryConnectionError:
        return MemoryConnectionError(
            f"{self.method} {self.path}: no answer after {attempts} attempt(s): "
            f"{type(error).__name__}: {error}"
        )


@dataclass(frozen=True)
class RetryPolicy:
    """Jittered exponential backoff, only where another attempt cannot do harm.

    `retries` is the number of extra attempts. A retry-safe call is sent again
    after a transport failure (refused, reset, timed out) or a 429/502/503/504;
    any other call only when it provably never left (a failed connect): a write
    whose answer was lost may have been applied, and a permission evaluation
    consumes an allow-once grant.
    """

    retries: int = 3
    first_delay: float = 0.1
    max_delay: float = 2.0
    # The longest `Retry-After` waited for; a longer one ends the retries.
    max_retry_after: float = 10.0

    def delay(
        self,
        call: Call[Any],
        attempt: int,
        *,
        status: int | None = None,
        error: httpx.TransportError | None = None,
        retry_after: float | None = None,
    ) -> float | None:
        """Seconds to wait before attempt `attempt + 1` (counting from 0), or None
        to stop here: with the answer (`status`, its `Retry-After` header's seconds)
        or with the failure (`error`). The server's `Retry-After` is waited for
        (it knows how long an overload or a full store lasts), with jitter."""
        if attempt >= self.retries:
            return None
        if error is not None:
            if not (call.retry_safe or isinstance(error, UNSENT_ERRORS)):
                return None
        elif not call.retry_safe or status not in RETRY_STATUSES or status in call.accept:
            return None
        if retry_after is not None:
            if retry_after > self.max_retry_after:
                return None
            return random.uniform(retry_after, retry_after * 1.2)  # noqa: S311 - jitter
        ceiling = min(self.max_delay, self.first_delay * 2**attempt)
        # Half fixed, half random: spread clients that failed together apart.
        return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not security


def next_poll(name: str, deadline: float, interval: float, timeout: float) -> float:
    """Seconds until `wait_operation` looks at operation `name` again; raises
    OperationTimeoutError once `deadline` (time.monotonic) has passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise OperationTimeoutError(f"operation {name} was not done within {timeout:g} s")
    return min(interval, remaining)
