"""The base of the API's middleware: plain ASGI, because Starlette's
BaseHTTPMiddleware costs more CPU than the record-turn route itself.

A `HttpMiddleware` handles the HTTP requests it `wants` (every one unless it
says otherwise) in `handle`; anything else (the lifespan, a request it does
not want) goes on to the app untouched.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Scope


class HttpMiddleware:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.wants(scope):
            await self.handle(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def wants(self, scope: Scope) -> bool:
        """Whether this HTTP request is one to handle."""
        return True

    async def handle(self, scope: Scope, receive: Any, send: Any) -> None:
        """One HTTP request it wants; it calls `self.app` to pass it on."""
        raise NotImplementedError
