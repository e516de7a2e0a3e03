"""Custom methods in paths (`POST /v1/memories/{memory_id}:rollback`), kept apart
from the plain route of the same resource (`GET /v1/memories/{memory_id}`).

Starlette matches routes on the decoded path, where `/v1/users/u:import` is both
user `u`'s import and user `u:import` itself: each route would take the other's
requests, and a 405's `Allow` would name the methods of both. Here the path as
sent decides. A literal `:verb` ending its last segment is that custom method,
and only its route matches (any other method: 405, `Allow` naming its own); an
id that itself ends in `:verb` is sent with its colon encoded (`%3A`), as the
project's client sends every id, and only the plain route matches it.
"""

from __future__ import annotations

import re

from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Scope

_CUSTOM = re.compile(r"^(?P<resource>.*\})(?P<verb>:[A-Za-z]+)$")


class ResourceRoute(APIRoute):
    """A route of a resource that has custom methods, or of one of those methods."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is Match.NONE:
            return match, child
        last = _last_segment_as_sent(scope)
        custom = _CUSTOM.match(self.path)
        if custom is not None:
            if not last.endswith(custom["verb"]):
                return Match.NONE, {}
        elif any(last.endswith(verb) for verb in self._verbs(scope)):
            return Match.NONE, {}
        return match, child

    def _verbs(self, scope: Scope) -> tuple[str, ...]:
        """The custom methods of this route's resource (`:rollback`, …)."""
        verbs = getattr(self, "_custom_verbs", None)
        if verbs is None:
            found = (_CUSTOM.match(getattr(r, "path", "")) for r in scope["app"].router.routes)
            verbs = tuple(m["verb"] for m in found if m is not None and m["resource"] == self.path)
            self._custom_verbs = verbs
        return verbs


def _last_segment_as_sent(scope: Scope) -> str:
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw is not None else scope["path"]
    return path.rsplit("/", 1)[-1]
