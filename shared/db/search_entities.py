"""The entity ranking of the hybrid statement (`shared.db.search`): a third ranking
beside vector distance and full text, fused the same way (`weight / (k + rank)`,
the weight `Fusion.entity_weight`).

Per sub-query, the entities it names: an alias of the user's entities (of the
searched project and the global ones, none merged away) that the sub-query's
normalised text holds as whole words. Then one hop: the entities a fact links to
those (subject to object or back; with `as_of`, a fact true at that moment).
The rows ranked are those mentioning any of them that the search's filter
admits: first by how many named entities they mention, then how many one hop
away, then the most recently said, the `candidates` best. A query that names no
entity has no entity ranking.
"""

from __future__ import annotations

from typing import Any

from shared.entities.names import normalise
from shared.memory.ranking import Scope

# The mentions' column that points at each table's rows.
_MENTION_COLUMN = {"memories": "memory_id", "episodes": "episode_id"}


def entity_params(scope: Scope, queries: list[str]) -> dict[str, Any]:
    """The entity ranking's parameters: each sub-query's normalised text, padded so
    that an alias matches as whole words, and the project whose entities count."""
    return {
        "qnorm": [f" {normalise(q)} " for q in queries],
        "entity_project": scope.project_id,
    }


def entity_ctes(table: str, where: str, as_of: bool) -> str:
    """The common tables `named`, `linked` and `ent` (qi, id, rank), each starting
    with a comma, to follow the vector and text rankings' in the WITH clause."""
    column = _MENTION_COLUMN[table]
    true_then = (
        " AND f.valid_from <= %(as_of)s AND (f.valid_to IS NULL OR f.valid_to > %(as_of)s)"
        if as_of
        else ""
    )
    return f""",
named AS (
    SELECT DISTINCT q.qi, a.entity_id
    FROM q JOIN entity_aliases a ON a.app = %(app)s AND a.user_id = %(user_id)s
        AND strpos((%(qnorm)s::text[])[q.qi], ' ' || a.normalised || ' ') > 0
    JOIN entities e ON e.id = a.entity_id AND e.merged_into IS NULL
        AND e.project_id IN (%(entity_project)s, '')
),
linked AS (
    SELECT l.qi, l.entity_id, min(l.hop) AS hop FROM (
        SELECT n.qi, n.entity_id, 0 AS hop FROM named n
        UNION ALL
        SELECT n.qi, CASE WHEN f.subject_id = n.entity_id THEN f.object_id ELSE f.subject_id END,
               1
        FROM named n JOIN entity_facts f ON f.object_id IS NOT NULL
            AND (f.subject_id = n.entity_id OR f.object_id = n.entity_id){true_then}
    ) l GROUP BY l.qi, l.entity_id
),
ent AS (
    SELECT r.qi, r.id, r.rank FROM (
        SELECT s.qi, s.id,
               row_number() OVER (PARTITION BY s.qi
                                  ORDER BY s.direct DESC, s.hops DESC, s.seen DESC, s.id) AS rank
        FROM (
            SELECT l.qi, em.{column} AS id,
                   count(*) FILTER (WHERE l.hop = 0) AS direct,
                   count(*) FILTER (WHERE l.hop = 1) AS hops,
                   max(em.observed_at) AS seen
            FROM linked l
            JOIN entity_mentions em ON em.entity_id = l.entity_id AND em.{column} IS NOT NULL
            JOIN {table} m ON m.id = em.{column}
            WHERE {where}
            GROUP BY l.qi, em.{column}
        ) s
    ) r WHERE r.rank <= %(candidates)s
)"""


NO_ENTITIES = """,
ent AS (SELECT NULL::bigint AS qi, NULL::uuid AS id, NULL::bigint AS rank WHERE false)"""
