"""The client's exceptions: one per kind of answer a caller handles differently.

Every error the API answers carries `{"error": {"code", "message", "fields"?}}`;
the exception keeps all of it, so a caller can show the API's own message (it
names the bad field) instead of a bare status code.
"""

from __future__ import annotations

from typing import Any

import httpx


class MemoryClientError(Exception):
    """Anything the client raises on purpose: catch this to catch them all."""


class MemoryApiError(MemoryClientError):
    """The API answered with an error status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: list[dict[str, str]] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        # [{field, message}] for each bad field of a 422 (or of a 410 naming created_at).
        self.fields = fields or []
        # Any other keys of the error object, e.g. the `turn_id` and `event_id` of a
        # record-turn 503 (retry with that turn_id: it is the same turn).
        self.details = details or {}
        self.retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class AuthenticationError(MemoryApiError):
    """401: no API key, or an unknown or revoked one."""


class PermissionDeniedError(MemoryApiError):
    """403: the key may not do this (compaction needs an admin key)."""


class NotFoundError(MemoryApiError):
    """404: nothing of that id for this user in this key's app."""


class ConflictError(MemoryApiError):
    """409: the request conflicts with the current state."""


class GoneError(MemoryApiError):
    """410: the user was deleted after this turn was created; it is not recorded."""


class InvalidRequestError(MemoryApiError):
    """422: a bad request; `fields` names each bad field with the reason."""


class RateLimitedError(MemoryApiError):
    """429: too many requests (retried first where the call is safe to repeat)."""


class ServiceUnavailableError(MemoryApiError):
    """503, and any other 5xx: the API or one of its stores is down right now."""


class MemoryConnectionError(MemoryClientError):
    """No answer from the API (connection refused, reset, timed out) after the retries."""


class OperationTimeoutError(MemoryClientError, TimeoutError):
    """`wait_operation` gave up: the operation was not done by its deadline."""


_BY_STATUS: dict[int, type[MemoryApiError]] = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    422: InvalidRequestError,
    429: RateLimitedError,
}


def error_class(status: int) -> type[MemoryApiError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServiceUnavailableError if status >= 500 else MemoryApiError


def api_error(response: httpx.Response) -> MemoryApiError:
    """The typed exception of an error answer. A body not in the API's format (a
    proxy's HTML page, say) still gives its status, with the start of its text."""
    status = response.status_code
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:200]
        return error_class(status)(status, "http_error", text or response.reason_phrase)
    fields = error.get("fields") if isinstance(error.get("fields"), list) else None
    details = {k: v for k, v in error.items() if k not in ("code", "message", "fields")}
    error = error_class(status)(status, code, message, fields, details)
    error.retry_after = retry_after(response)
    return error


def retry_after(response: httpx.Response) -> float | None:
    """When to try again, as the server says: the `Retry-After` header's seconds
    (the API sends a number, never a date); None when it says nothing."""
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None
