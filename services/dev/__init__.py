"""What runs on a developer's machine only: the local stack's supervisor
(`agent-memory up`) and the demo (`agent-memory demo`). Nothing in production
imports it."""
