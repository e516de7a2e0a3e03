"""The agent-facing read API (HTTP/JSON, FastAPI)."""
