"""The library the agent-memory services share: configuration, events, the bus, storage."""
