"""The Valkey keys of a session and of a user.

Every key of a session carries the session's hash tag (`am:{app:user:session}:…`),
so all of them live in one cluster slot and one script can touch them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from urllib.parse import quote

from shared.session_buffer.scripts import SUFFIXES


def _part(value: str) -> str:
    # Escape the characters that structure the key, so ("a:b","c") != ("a","b:c").
    return quote(value, safe="")


# A deleted user's tombstone: when the deletion happened (epoch seconds). It has no
# TTL (so no eviction policy takes it either): a dead letter can be replayed at any
# time, and the summary path has no other record of the deletion.


def tombstone_key(app: str, user_id: str) -> str:
    return f"am:deleted:{{{_part(app)}:{_part(user_id)}}}"


def user_keys_pattern(app: str, user_id: str) -> str:
    """SCAN pattern of every session (and grant) key of one user. The escaped
    parts hold no glob characters (`quote` encodes * ? [ ])."""
    return f"am:{{{_part(app)}:{_part(user_id)}:*"


def meta_key_of(key: str) -> str:
    """The `meta` key of the session that `key` (any key of a session) belongs to:
    its hash tag ends at the first `}` (the escaped parts hold none)."""
    return f"{key[: key.index('}') + 1]}:meta"


def project_marker(project_id: str) -> str:
    """The `meta` field that says a session had a turn of this project."""
    return f"project:{project_id}"


@dataclass(frozen=True)
class SessionKey:
    app: str
    user_id: str
    session_id: str

    @cached_property
    def tag(self) -> str:
        return "{" + ":".join(_part(p) for p in (self.app, self.user_id, self.session_id)) + "}"

    def key(self, suffix: str) -> str:
        return f"am:{self.tag}:{suffix}"

    @cached_property
    def tombstone(self) -> str:
        return tombstone_key(self.app, self.user_id)

    @cached_property
    def keys(self) -> list[str]:
        """Every key of the session, in the order the scripts expect."""
        return [self.key(s) for s in SUFFIXES]
