-- Full-text indexes take each new row's lexemes at once (fastupdate off) instead of
-- keeping them in a pending list until a vacuum merges it: every search reads
-- that whole list, up to gin_pending_list_limit (4 MB), so searches slowed as
-- memories were written (3,000 new memories, 70 pending pages: search p50 16.0
-- against 14.7 ms once merged, bench/retrieval.py's data). A write pays the
-- index insert instead, a few lexemes per memory. The list already there is
-- merged now.
ALTER INDEX memories_tsv SET (fastupdate = off);
ALTER INDEX episodes_tsv SET (fastupdate = off);
SELECT gin_clean_pending_list('memories_tsv'::regclass);
SELECT gin_clean_pending_list('episodes_tsv'::regclass);
