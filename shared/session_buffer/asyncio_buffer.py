"""The API's session buffer: an asyncio client, on the event loop."""

from __future__ import annotations

import valkey
import valkey.asyncio

from shared.session_buffer.core import (
    SUMMARY_FIELDS,
    BufferCore,
    append_result,
    summary,
    text_of,
    unlocked_view,
)
from shared.session_buffer.keys import SessionKey
from shared.session_buffer.model import AppendResult, BufferedTurn, SessionView, Summary
from shared.session_buffer.scripts import APPEND


class AsyncSessionBuffer(BufferCore):
    """The API's side of the buffer on an asyncio client: appends and reads run
    on the event loop, with no thread hop. Same scripts, same results."""

    client: valkey.asyncio.Valkey

    async def append(
        self, key: SessionKey, turn: BufferedTurn, prev_session_id: str = "", own_only: bool = False
    ) -> AppendResult:
        """`own_only`: refuse (`other_agent`) a turn of an agent whose session it is not."""
        for attempt in (1, 2):
            pipe = self.client.pipeline(transaction=False)
            self._queue_append(pipe, key, turn, prev_session_id, own_only)
            try:
                reply, tombstone = await pipe.execute()
                break
            except valkey.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                await self.client.script_load(APPEND)
        result = append_result(turn, reply, tombstone)
        if result.dropped:
            await self._take_back(key, turn)
        return result

    async def read(self, key: SessionKey, with_folds: bool = False) -> SessionView:
        return unlocked_view(await self._read_script(key, with_folds))

    async def read_summary(self, key: SessionKey, agent_id: str) -> Summary:
        """The session's summary as `agent_id` ('' the user's own) may read it: none
        (version 0) when the session is another agent's."""
        # valkey types the blocking and asyncio clients' answers as one union.
        values = await self.client.hmget(key.key("meta"), [*SUMMARY_FIELDS, "agent"])  # type: ignore[misc]
        *fields, owner = values
        if owner is not None and text_of(owner) != agent_id:
            return Summary()
        return summary(fields)

    async def delete(self, key: SessionKey) -> int:
        """Remove the session's short-term memory: every key. Returns keys removed."""
        return int(await self.client.delete(*key.keys))
