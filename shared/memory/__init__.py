"""Long-term memory: the memory store, hybrid retrieval, consolidation and context."""
