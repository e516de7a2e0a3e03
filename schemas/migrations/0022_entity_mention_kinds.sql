-- What kind each mention called its entity (shared/db/entities.py): a read that
-- does not see every mention of an entity (another agent's, shared/db/entity_reads.py)
-- shows the kind its own mentions say, not one another agent's named. NULL for
-- mentions written before: their kind is not known, and such a read shows `other`.
ALTER TABLE entity_mentions ADD COLUMN kind text;
