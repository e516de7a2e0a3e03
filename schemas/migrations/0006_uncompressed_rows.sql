-- Store a memory's or an episode's row whole and uncompressed whenever it fits a
-- page. toast_tuple_target is the row length above which Postgres compresses the
-- row's values and moves them to TOAST: 2 KB by default, less than a 768-dimension
-- embedding (3 KB). With it, a dense (Gemini) embedding made Postgres move every
-- other value over 24 bytes out of the row first, a UUID user id or a long app or
-- project id included, so each scope check on a candidate row read TOAST; and a
-- sparse (hash) embedding was compressed, so each exact distance decompressed it
-- (19 ms against 10 ms to rank a 3,700-row scope, bench/retrieval.py's data).
-- Values move out only when a row would not fit a page, the largest first.
-- Applies to rows written from now on (docs/operations.md).
ALTER TABLE memories SET (toast_tuple_target = 8160);
ALTER TABLE episodes SET (toast_tuple_target = 8160);
