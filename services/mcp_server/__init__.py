"""The memory as MCP tools (Model Context Protocol), on the official `mcp` SDK.

One set of tools (`tools.build_server`) for both transports, each calling the
API through the project's async client, so every API rule (validation, tenancy,
errors) applies unchanged:

- stdio (`agent-memory mcp`, `stdio.main`): a client launches the server; it
  talks to the API at `AGENT_MEMORY_URL` with `AGENT_MEMORY_API_KEY`.
- streamable HTTP at the API's `/mcp` (`services.api.mcp`): the tools call the
  same app in process with the caller's own API key.
"""
