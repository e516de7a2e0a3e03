"""The entity ranking of the hybrid statement (`shared.db.search`): a third ranking
beside vector distance and full text, fused the same way (`weight / (k + rank)`,
the weight `Fusion.entity_weight`).

Per sub-query, the entities it **names**: an alias of the user's entities (of
the searched project and the global ones, none merged away) that the
sub-query's normalised text holds as whole words, of the aliases the read may
use (`shared.db.entity_seen`: not another agent's names). Then **one hop**: the
entities a fact the read sees links to those (subject to object or back; with
`as_of`, a fact true at that moment), and the entities that the full-text ranking's best
`ENTITY_HINTS` rows mention (the question's words found a turn, and that turn
names who or what it is about: "the friend who went to Porto" → "Ravi and I are
going to Porto" → Ravi). The rows ranked are those mentioning any of them that
the search's filter admits and that the full-text ranking did not find (a row
that says the question's words has its place already; this ranking brings the
rows that name the same entity otherwise, by an alias or a nickname, or a hop
away): first by how many named entities they mention, then by their one-hop
entities, each counting the less the more rows mention it, then the most
recently said; the `candidates` best. A hop's weight counts every mention of
the user's (whose they are would cost a lookup per mention of a common entity):
how often another agent names an entity can reorder an agent's own rows, but no
name or fact of another agent's names, links or ranks anything.
"""

from __future__ import annotations

from typing import Any

from shared.db.entity_seen import ALIAS_SEEN, FACT_SEEN
from shared.entities.names import normalise
from shared.memory.ranking import Scope

# How many of the full-text ranking's best rows lend their entities as one hop.
ENTITY_HINTS = 1
# The mentions' column that points at each table's rows.
_MENTION_COLUMN = {"memories": "memory_id", "episodes": "episode_id"}


def entity_params(scope: Scope, queries: list[str]) -> dict[str, Any]:
    """The entity ranking's parameters: each sub-query's normalised text, padded so
    that an alias matches as whole words, and the project whose entities count."""
    return {
        "qnorm": [f" {normalise(q)} " for q in queries],
        "entity_project": scope.project_id,
        "entity_hints": ENTITY_HINTS,
        "agent": scope.agent_id,
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
    WHERE {ALIAS_SEEN}
),
linked AS (
    SELECT h.qi, h.entity_id, h.hop,
           CASE WHEN h.hop = 0 THEN 1.0 ELSE 1.0 / greatest(1, (
               SELECT count(*) FROM entity_mentions c
               WHERE c.entity_id = h.entity_id AND c.{column} IS NOT NULL)) END AS weight
    FROM (
        SELECT l.qi, l.entity_id, min(l.hop) AS hop FROM (
            -- hop: 0 named, 1 a fact away, 1 + r lent by the full text's r-th row.
            SELECT n.qi, n.entity_id, 0 AS hop FROM named n
            UNION ALL
            SELECT n.qi,
                   CASE WHEN f.subject_id = n.entity_id THEN f.object_id ELSE f.subject_id END, 1
            FROM named n JOIN entity_facts f ON f.object_id IS NOT NULL
                AND (f.subject_id = n.entity_id OR f.object_id = n.entity_id){true_then}
                AND {FACT_SEEN}
            UNION ALL
            SELECT t.qi, em.entity_id, 1 + t.rank
            FROM txt t JOIN entity_mentions em ON em.{column} = t.id
            WHERE t.rank <= %(entity_hints)s
        ) l GROUP BY l.qi, l.entity_id
    ) h
),
ent AS (
    SELECT r.qi, r.id, r.rank, r.named FROM (
        SELECT s.qi, s.id,
               row_number() OVER (PARTITION BY s.qi ORDER BY s.direct DESC, s.lent,
                                  s.hops DESC, s.seen DESC, s.id) AS rank,
               EXISTS (SELECT 1 FROM named n WHERE n.qi = s.qi) AS named
        FROM (
            SELECT l.qi, em.{column} AS id,
                   count(*) FILTER (WHERE l.hop = 0) AS direct,
                   min(l.hop) FILTER (WHERE l.hop > 0) AS lent,
                   coalesce(sum(l.weight) FILTER (WHERE l.hop > 0), 0) AS hops,
                   max(em.observed_at) AS seen
            FROM linked l
            JOIN entity_mentions em ON em.entity_id = l.entity_id AND em.{column} IS NOT NULL
            JOIN {table} m ON m.id = em.{column}
            LEFT JOIN txt t ON t.qi = l.qi AND t.id = m.id
            WHERE {where} AND t.id IS NULL
            GROUP BY l.qi, em.{column}
        ) s
    ) r WHERE r.rank <= %(candidates)s
)"""


NO_ENTITIES = """,
ent AS (
    SELECT NULL::bigint AS qi, NULL::uuid AS id, NULL::bigint AS rank, false AS named WHERE false
)"""
