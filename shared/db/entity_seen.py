"""Which of an entity's mentions, facts and aliases a read sees, as SQL conditions
over the parameters `agent` (the agent reading, '' none) and `agents` (the owners
whose rows it sees, `shared.memory.agents.visible_to`).

A mention is seen when its memory or turn is; a fact when its source memory is
(a fact without one, by a read naming no agent only). An alias may name an
entity for a read when a mention the read sees says it (compared without case),
or when the read sees every mention: the names the entity views show
(`shared.entities.shown`), so that another agent's "Dana Lee" neither names nor
ranks anything for an agent whose own rows only say "Dana".
"""

from __future__ import annotations


def _mention_seen(mention: str) -> str:
    """Whether the read sees the entity_mentions row called `mention`."""
    return (
        f"coalesce((SELECT m.agent_id FROM memories m WHERE m.id = {mention}.memory_id), "
        f"(SELECT p.agent_id FROM episodes p WHERE p.id = {mention}.episode_id)) "
        "= ANY(%(agents)s)"
    )


MENTION_SEEN = _mention_seen("em")

# Whether the read sees fact `f` (an entity_facts row).
FACT_SEEN = (
    "(CASE WHEN f.memory_id IS NULL THEN %(agent)s::text = '' ELSE EXISTS (SELECT 1 "
    "FROM memories fm WHERE fm.id = f.memory_id AND fm.agent_id = ANY(%(agents)s)) END)"
)

# Whether alias `a` (an entity_aliases row) may name its entity for the read.
ALIAS_SEEN = (
    "(EXISTS (SELECT 1 FROM entity_mentions sa WHERE sa.entity_id = a.entity_id "
    f"AND lower(sa.surface) = lower(a.alias) AND {_mention_seen('sa')}) "
    "OR NOT EXISTS (SELECT 1 FROM entity_mentions ha WHERE ha.entity_id = a.entity_id "
    f"AND NOT {_mention_seen('ha')}))"
)
