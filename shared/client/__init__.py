"""Python client of the agent-memory HTTP API.

    from shared.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8080", api_key="am_...") as memory:
        memory.record_turn("session-1", "user-1", "I prefer tea.", "Noted.")
        instruction = memory.context("user-1", "session-1", "what to drink?").system_instruction

`AsyncMemoryClient` has the same methods for asyncio. The answers are the API's
models, by their names in its OpenAPI document (`shared.client.models`). This
package needs only httpx and pydantic: it imports nothing else of `shared`, so an
agent service can use it without the server's dependencies (Postgres, Valkey,
Pub/Sub).
"""

from shared.client import models
from shared.client.aio import AsyncMemoryClient
from shared.client.errors import (
    AuthenticationError,
    ConflictError,
    GoneError,
    InvalidRequestError,
    MemoryApiError,
    MemoryClientError,
    MemoryConnectionError,
    NotFoundError,
    OperationTimeoutError,
    PermissionDeniedError,
    RateLimitedError,
    ServiceUnavailableError,
)
from shared.client.sync import MemoryClient

__all__ = [
    "AsyncMemoryClient",
    "AuthenticationError",
    "ConflictError",
    "GoneError",
    "InvalidRequestError",
    "MemoryApiError",
    "MemoryClient",
    "MemoryClientError",
    "MemoryConnectionError",
    "NotFoundError",
    "OperationTimeoutError",
    "PermissionDeniedError",
    "RateLimitedError",
    "ServiceUnavailableError",
    "models",
]
