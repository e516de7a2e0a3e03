-- Keep embeddings in the row (storage MAIN) rather than in TOAST (pgvector's
-- default, EXTERNAL): a 768-dimension vector is 3 KB, so two rows share a page,
-- and an exact distance scan over a user's rows reads each row's page instead of
-- the row, the TOAST index and two TOAST chunks. MAIN still moves a value out of
-- line when a row would not fit a page. Applies to rows written from now on.
ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN;
ALTER TABLE episodes ALTER COLUMN embedding SET STORAGE MAIN;
