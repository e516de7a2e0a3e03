# Generated from shared/client/aio_connection.py by `make client` (tools/client_sync.py).
# Do not edit: change shared/client/aio_connection.py and run `make client`.
"""The client's connection: its HTTP client, the retry policy, and sending one
call (shared.client.call) until it is answered or may not be tried again.

Generated from aio_connection.py, the asyncio client, by `make client`: edit that
module.
"""

from __future__ import annotations

from time import sleep
from types import TracebackType
from typing import Self, TypeVar

import httpx

from shared.client.call import Call, RetryPolicy, client_headers
from shared.client.errors import retry_after

T = TypeVar("T")


class Connection:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._timeout = timeout
        self._policy = RetryPolicy(retries)
        self._http = httpx.Client(
            base_url=base_url,
            headers=client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.request(**call.request_args(self._timeout))
            except httpx.TransportError as exc:
                delay = self._policy.delay(call, attempt, error=exc)
                if delay is None:
                    raise call.unreachable(exc, attempt + 1) from exc
            else:
                delay = self._policy.delay(
                    call, attempt, status=response.status_code, retry_after=retry_after(response)
                )
                if delay is None:
                    return call.finish(response)
            sleep(delay)
            attempt += 1
