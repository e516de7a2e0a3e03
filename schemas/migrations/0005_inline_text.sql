-- Keep the text and its tsvector in the row too (storage MAIN, as the embedding
-- since 0003). With the embedding MAIN and these EXTENDED, a row over 2 KB had
-- its text and tsvector moved to TOAST first (Postgres moves EXTENDED values out
-- before it even compresses MAIN ones): then ranking 1,000 full-text matches read
-- four TOAST pages per row, 5.4 ms against 0.9 ms inline (bench/retrieval.py's
-- data). MAIN values still leave the row when it would not fit a page; the
-- episode's user text, assistant text and tool events stay EXTENDED, so they are
-- the first to go. Applies to rows written from now on (VACUUM FULL rewrites the
-- old ones).
ALTER TABLE memories ALTER COLUMN text SET STORAGE MAIN, ALTER COLUMN tsv SET STORAGE MAIN;
ALTER TABLE episodes ALTER COLUMN text SET STORAGE MAIN, ALTER COLUMN tsv SET STORAGE MAIN;
