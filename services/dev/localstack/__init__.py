"""The local stack: embedded PostgreSQL with pgvector, Valkey, the Pub/Sub emulator,
and the agent-memory processes, started with no Docker and no root."""
