"""The client's connection: its HTTP client, the retry policy, and sending one
call (shared.client.call) until it is answered or may not be tried again.

sync_connection.py is generated from this module (`make client`); the route
methods are added by aio_memories.py and aio.py.
"""

from __future__ import annotations

from asyncio import sleep
from types import TracebackType
from typing import Self, TypeVar

import httpx

from shared.client.call import Call, RetryPolicy, client_headers
from shared.client.errors import retry_after

T = TypeVar("T")


class AsyncConnection:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._timeout = timeout
        self._policy = RetryPolicy(retries)
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.request(**call.request_args(self._timeout))
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
            await sleep(delay)
            attempt += 1
