-- An archived turn writes three episode rows (itself and the keys of the two turns
-- before it), each key with the words of five turns; inserted one by one into the
-- full-text index, they cost the extraction worker much of its throughput. The
-- episodes' index keeps new entries in a pending list again, merged in bulk, and
-- the list is kept small (512 kB), as every archive search reads it.
ALTER INDEX episodes_tsv SET (fastupdate = on, gin_pending_list_limit = 512);
