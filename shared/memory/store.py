"""The memory model's reserved names. A memory's rows and revisions are in
`shared.db.memories`; how candidates become memories, in `shared.memory.consolidate`."""

from __future__ import annotations

# The entity of a user's compacted summary of old episodes (one per scope and
# project, kind `event`), written only by the compaction worker.
COMPACTED_ENTITY = "compacted-episodes"
