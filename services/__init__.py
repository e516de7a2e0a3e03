"""The agent-memory processes: the API and the workers. Thin: wiring and handlers."""
