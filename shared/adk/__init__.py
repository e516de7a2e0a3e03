"""Google ADK integration (the optional extra `adk`: `pip install 'agent-memory[adk]'`).

    from shared.adk import (
        AgentMemoryService, archive_search_tool, memory_callbacks, permission_guardrail,
    )
    from shared.client import AsyncMemoryClient

    client = AsyncMemoryClient(base_url, api_key)
    agent = LlmAgent(
        name="dev", model="gemini-2.5-flash", instruction="You are a careful engineer.",
        tools=[run_shell, archive_search_tool(client)],
        before_tool_callback=permission_guardrail(client),
        **memory_callbacks(client),
    )
    runner = Runner(
        app_name="dev", agent=agent, session_service=InMemorySessionService(),
        memory_service=AgentMemoryService(client),
    )

The project of a session is its state's `project_id` (set it when creating the
session: `state={"project_id": "CloudRetail"}`), else the `project_id` given to
each of these, else none (the user's global memories only). The ADK `app_name`
is not the tenant: the client's API key decides the app.

The alternative to this native wiring is the MCP server (docs/mcp.md): the agent
gets the memory as tools (get_context, remember, search_memories, forget,
check_tool_permission, ...) and decides itself when to call them, through ADK's
own `McpToolset`, launching `agent-memory mcp` or reaching the API's `/mcp`:

    from google.adk.tools.mcp_tool import (
        McpToolset, StdioConnectionParams, StreamableHTTPConnectionParams,
    )
    from mcp import StdioServerParameters

    tools = McpToolset(connection_params=StdioConnectionParams(
        server_params=StdioServerParameters(command="agent-memory", args=["mcp"], env={
            "AGENT_MEMORY_URL": base_url, "AGENT_MEMORY_API_KEY": api_key,
            "AGENT_MEMORY_USER_ID": user_id,
        })))
    # or, with no process to launch:
    tools = McpToolset(connection_params=StreamableHTTPConnectionParams(
        url=f"{base_url}/mcp", headers={"Authorization": f"Bearer {api_key}"}))
    agent = LlmAgent(name="dev", model="gemini-2.5-flash", tools=[tools])

Over HTTP each call names its `user_id`: there is no server-side default.

Only this package imports google-adk; the rest of the project never does.
"""

try:
    import google.adk  # noqa: F401 - fail here, with the fix in the message
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise ImportError("shared.adk needs google-adk: pip install 'agent-memory[adk]'") from exc

from shared.adk.callbacks import (
    PREV_SESSION_STATE_KEY,
    PROJECT_STATE_KEY,
    AmbientMemory,
    memory_callbacks,
)
from shared.adk.guardrail import denied, permission_guardrail
from shared.adk.limits import TurnLimits
from shared.adk.memory_service import AgentMemoryService
from shared.adk.tools import archive_search_tool
from shared.adk.turns import AdkTurn, turn_id_for, turns_from_events

__all__ = [
    "PREV_SESSION_STATE_KEY",
    "PROJECT_STATE_KEY",
    "AdkTurn",
    "AgentMemoryService",
    "AmbientMemory",
    "TurnLimits",
    "archive_search_tool",
    "denied",
    "memory_callbacks",
    "permission_guardrail",
    "turn_id_for",
    "turns_from_events",
]
