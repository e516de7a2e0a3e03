-- Editing a memory directly, and the caller's metadata on it.

-- The caller's own JSON object (bounded in size and depth by the API); filters read
-- it. jsonb_path_ops answers containment (@>) and JSON path (@?, @@) tests, which
-- is what a filter on a metadata key compiles to; only live rows are searched.
ALTER TABLE memories ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX memories_metadata ON memories USING gin (metadata jsonb_path_ops)
    WHERE valid_to IS NULL;

-- Who made a revision: '' for the pipeline (its event says which), 'key:<id>' for
-- an edit through the API, the MCP tools or the console (the caller's API key).
ALTER TABLE memory_revisions ADD COLUMN source text NOT NULL DEFAULT '';
-- What the memory was after the revision besides its text (kind, entity_name,
-- topic, metadata): a rollback restores it too. NULL for revisions that changed
-- only the text.
ALTER TABLE memory_revisions ADD COLUMN state jsonb;
