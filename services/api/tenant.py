"""The tenant (`app`) of a request: set by the authentication middleware from the
caller's API key, never from the body. Every route scopes its reads and writes
by it (services.api.deps `AppIdDep`)."""

from __future__ import annotations

from fastapi import Request


def app_of(request: Request) -> str:
    """The app whose key made this request."""
    return request.state.app_id


def is_admin(request: Request) -> bool:
    """Whether the request's key is an admin key of its app."""
    return bool(getattr(request.state, "admin", False))


def caller_of(request: Request) -> str:
    """Who made this request, as a revision's source names it: `key:<id>` of its API
    key, or `api` when authentication is off."""
    key_id = getattr(request.state, "key_id", "")
    return f"key:{key_id}" if key_id else "api"
