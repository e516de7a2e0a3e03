"""The agent-facing API (HTTP/JSON, FastAPI): it serves the reads and the writes."""
