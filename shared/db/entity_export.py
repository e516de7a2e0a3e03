"""Reading one user's entities, facts and merges as export lines
(`shared.portability.entity_records`), in the export's snapshot
(`shared.db.user_export`). Postgres writes each line, as for memories.
"""

from __future__ import annotations

# Merged entities too (their mentions moved away, their aliases kept), so that a
# merge imported can be undone.
ENTITY_LINES = """
SELECT json_build_object(
    'type', 'entity', 'id', e.id, 'project_id', nullif(e.project_id, ''), 'name', e.name,
    'kind', e.kind, 'first_seen', e.first_seen, 'last_seen', e.last_seen,
    'created_at', e.created_at,
    'aliases', (SELECT coalesce(json_agg(json_build_object(
                    'alias', a.alias, 'normalised', a.normalised, 'how', a.how)
                    ORDER BY a.normalised), '[]')
                FROM entity_aliases a WHERE a.entity_id = e.id),
    'mentions', (SELECT coalesce(json_agg(json_build_object(
                    'memory_id', m.memory_id, 'episode_id', m.episode_id,
                    'surface', m.surface, 'observed_at', m.observed_at, 'kind', m.kind)
                    ORDER BY m.id), '[]')
                 FROM entity_mentions m WHERE m.entity_id = e.id))::text
FROM entities e
WHERE e.app = %(app)s AND e.user_id = %(user_id)s
ORDER BY e.created_at, e.id
"""

FACT_LINES = """
SELECT json_build_object(
    'type', 'fact', 'id', f.id, 'subject_id', f.subject_id, 'predicate', f.predicate,
    'object_id', f.object_id, 'value', f.value, 'single', f.single,
    'valid_from', f.valid_from, 'valid_to', f.valid_to, 'memory_id', f.memory_id,
    'event_id', f.event_id, 'recorded_at', f.recorded_at)::text
FROM entity_facts f
WHERE f.app = %(app)s AND f.user_id = %(user_id)s
ORDER BY f.recorded_at, f.id
"""

# Moved mentions by their row and present holder; a mention deleted since (its
# memory erased) is left out, as undoing the merge would find nothing of it.
MERGE_LINES = """
SELECT json_build_object(
    'type', 'merge', 'id', g.id, 'merged_id', g.merged_id, 'into_id', g.into_id,
    'merged_at', g.merged_at, 'undone_at', g.undone_at,
    'moved', json_build_object(
        'mentions', (SELECT coalesce(json_agg(json_build_object(
                        'memory_id', m.memory_id, 'episode_id', m.episode_id,
                        'entity_id', m.entity_id) ORDER BY m.id), '[]')
                     FROM entity_mentions m
                     WHERE m.id IN (SELECT jsonb_array_elements_text(g.moved -> 'mentions')
                                           ::bigint)),
        'aliases', g.moved -> 'aliases',
        'subject_facts', g.moved -> 'subject_facts',
        'object_facts', g.moved -> 'object_facts'))::text
FROM entity_merges g
WHERE g.app = %(app)s AND g.user_id = %(user_id)s
ORDER BY g.merged_at, g.id
"""

# After the memories and episodes, in the order an import needs them.
LINES = (
    ("export_entities", ENTITY_LINES),
    ("export_facts", FACT_LINES),
    ("export_merges", MERGE_LINES),
)
