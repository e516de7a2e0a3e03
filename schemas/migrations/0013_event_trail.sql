-- The console's event trail finds what one event did: the revisions it caused and
-- its archived turn. Both were reachable only through a user until now.
CREATE INDEX IF NOT EXISTS memory_revisions_event ON memory_revisions (event_id)
    WHERE event_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS episodes_event ON episodes (event_id);
