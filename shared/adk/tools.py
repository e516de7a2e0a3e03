"""`search_archived_memory`: an ADK tool over `/v1/archive:search`, the verbatim
archive of every turn the user recorded.

No `from __future__ import annotations` here: ADK reads the tool function's
annotations at run time to build the declaration the model sees.
"""

from typing import Any

from google.adk.tools import FunctionTool, ToolContext

from shared.adk.callbacks import project_of
from shared.client import AsyncMemoryClient

MAX_LIMIT = 20  # what one tool call may ask for, whatever the model says
MAX_CONTEXT_TURNS = 5  # the API's bound


def archive_search_tool(client: AsyncMemoryClient, project_id: str | None = None) -> FunctionTool:
    """The `search_archived_memory(query, project_id=None, limit=3, context_turns=0)` tool.

    The user is the tool context's; without a `project_id` from the model, the
    session state's `project_id` (else the `project_id` given here) is searched."""
    default_project = project_id

    async def search_archived_memory(
        query: str,
        tool_context: ToolContext,
        project_id: str | None = None,
        limit: int = 3,
        context_turns: int = 0,
    ) -> dict[str, Any]:
        """Search the verbatim archive of this user's earlier conversation turns.

        Use it when the user refers to something said in an earlier session that
        the memory context above does not hold (exact commands, error messages,
        what was decided and when).

        Args:
          query: what to look for, in a few words.
          project_id: the project whose turns to search; omit for the current one.
          limit: how many turns to return (default 3).
          context_turns: also return, with each turn, this many turns of its
            conversation before and after it (0-5, default 0): a reply such as
            "Loved it!" makes sense only with the turn it answers.

        Returns:
          {"episodes": [{"text", "session_id", "turn_id", "created_at", "score",
          "context": [{"text", "turn_id", "created_at", "offset"}]}]}; `offset` -1
          is the turn just before the found one, 1 the one just after.
        """
        project = project_id or project_of(tool_context.state, default_project)
        episodes = await client.archive_search(
            tool_context.session.user_id,
            query,
            project_id=project,
            k=max(1, min(int(limit), MAX_LIMIT)),
            context_turns=max(0, min(int(context_turns), MAX_CONTEXT_TURNS)),
        )
        return {
            "episodes": [
                {
                    "text": e.text,
                    "session_id": e.session_id,
                    "turn_id": e.turn_id,
                    "created_at": e.created_at.isoformat(),
                    "score": e.score,
                    "context": [
                        {
                            "text": t.text,
                            "turn_id": t.turn_id,
                            "created_at": t.created_at.isoformat(),
                            "offset": t.offset,
                        }
                        for t in e.context
                    ],
                }
                for e in episodes
            ]
        }

    return FunctionTool(search_archived_memory)
