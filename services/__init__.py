"""The agent-memory processes: the read API and the workers. Thin: wiring and handlers."""
