"""The Pub/Sub event bus: topology, publisher, subscriber runtime, dead letters."""
