"""The session buffer in Valkey: a session's recent turns, ordered by their time,
and its rolling summary.

Keys of one session share a hash tag (`am:{app:user:session}:…`), so they live
in one cluster slot and one script can touch them all atomically. Every write
refreshes an idle TTL on every key of the session.

Appending is idempotent by `turn_id`: the `seen` set remembers every turn ever
appended to the session, so a redelivered or replayed event is a no-op even
after its turn has been folded into the summary and trimmed. A fold (the
summary worker's summarize-before-trim) is stored by one script that checks the
summary's version and the folded turns first, so a turn leaves the buffer only
inside exactly one summary version; `folds` records which.

Deleted users (GDPR): the deletion sets the user's tombstone key, then removes
every key of the user (SCAN). An append reads the tombstone in the same round
trip, after its script (one pipeline on one connection runs in order). If the
tombstone was not there yet, the append ran before the deletion's scan, which
removes it; if it was, the appender takes the turn back itself when it predates the
deletion (and the session's keys, if nothing else is in it: a user may come
back after a deletion, and their new turns stay). The order argument needs the
session and tombstone keys on one primary, as with a standalone Valkey or Redis.

A session is one agent's, or the user's own: the first turn appended says whose
(`meta`'s `agent`), and the API's append refuses the turns of any other agent
in the same script (`own_only`), so that two agents of a user never share one
buffer. The workers' appends never refuse: the event was accepted already.

`SessionBuffer` is the blocking client of the workers; `AsyncSessionBuffer` the
API's, on the event loop. Both run the same scripts, through one core.

Modules: `scripts` (the Lua scripts), `keys` (key names), `model` (turns, views,
results), `core` (script arguments and replies), `blocking` and `asyncio_buffer`
(the two clients).
"""

from shared.session_buffer.asyncio_buffer import AsyncSessionBuffer
from shared.session_buffer.blocking import SessionBuffer
from shared.session_buffer.keys import (
    SessionKey,
    meta_key_of,
    project_marker,
    tombstone_key,
    user_keys_pattern,
)
from shared.session_buffer.model import (
    AppendResult,
    BufferedTurn,
    FoldResult,
    SessionOfAnotherAgent,
    SessionView,
    Summary,
)
from shared.session_buffer.scripts import FOLD_TURN_GONE, FOLD_VERSION_MOVED

__all__ = [
    "FOLD_TURN_GONE",
    "FOLD_VERSION_MOVED",
    "AppendResult",
    "AsyncSessionBuffer",
    "BufferedTurn",
    "FoldResult",
    "SessionBuffer",
    "SessionKey",
    "SessionOfAnotherAgent",
    "SessionView",
    "Summary",
    "meta_key_of",
    "project_marker",
    "tombstone_key",
    "user_keys_pattern",
]
