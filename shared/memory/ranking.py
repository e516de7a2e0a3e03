"""How a hybrid search ranks, apart from its SQL (`shared.db.search`) and its entry
(`shared.memory.search`): whose rows it may see (`Scope`), how the two rankings
are weighed and bounded (`Fusion`), and how a row was ranked (`Ranked`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.config import Settings
from shared.embeddings import provider_vector_weight


@dataclass(frozen=True)
class TimeFilter:
    """Which moments a read sees: `as_of`, what was true then (valid time: the
    memories live at that moment, with the text they had, the facts that held,
    the turns said by then); `observed_after`/`observed_before`, rows observed
    (a memory's last change, a turn said) strictly between. All aware, UTC."""

    as_of: datetime | None = None
    observed_after: datetime | None = None
    observed_before: datetime | None = None


@dataclass(frozen=True)
class Scope:
    """Whose rows a search may see."""

    app: str
    user_id: str
    project_id: str = ""
    session_id: str = ""  # also this session's own memories (the context path)
    time: TimeFilter | None = None
    agent_id: str = ""  # this agent's memories too, beside the user's ('': the user's only)


@dataclass(frozen=True)
class Fusion:
    """How a search fuses its vector and full-text rankings: reciprocal rank fusion,
    `weight / (k + rank)` summed over the rankings, with each ranking's weight
    scaled per query (`shared.db.search`): by how far its 1st row stands out from
    its `top`-th (a relative gap of their distances or text weights), and the
    vector ranking's also by the share of its `top` rows that the full-text
    ranking found too; never below `floor` of the weight, so that a ranking still
    orders the rows only it found. `top` 0: the weights as given, for every query."""

    vector_weight: float = 0.4
    text_weight: float = 0.6
    # The entity ranking's (`shared.db.search_entities`); 0: not ranked at all.
    entity_weight: float = 0.0
    # How far feedback moves a memory: its score times 1 + this * its balance
    # (`shared.db.feedback.BALANCE_SQL`, within -1 and 1); 0: not at all.
    feedback_weight: float = 0.0
    k: int = 20
    top: int = 5
    floor: float = 0.01
    candidates: int = 30
    # Rows the full-text side ranks at most per sub-query (bounds its cost).
    text_scan: int = 1000
    # A lexeme in more than this share of the user's rows selects none (a stop
    # word, shared/db/search.py).
    max_frequency: float = 0.02
    # Scopes with fewer rows than this are ranked by exact distance (0: never).
    exact_below: int = 5000

    @classmethod
    def from_settings(cls, settings: Settings) -> Fusion:
        """The configured fusion; the vector weight is the embedding provider's unless
        `AM_SEARCH_VECTOR_WEIGHT` is set."""
        vector_weight = settings.search_vector_weight
        if vector_weight is None:
            vector_weight = provider_vector_weight(settings.embedding_provider)
        return cls(
            vector_weight=vector_weight,
            text_weight=settings.search_text_weight,
            entity_weight=settings.search_entity_weight,
            feedback_weight=settings.search_feedback_weight,
            k=settings.search_rrf_k,
            candidates=settings.search_candidates,
            text_scan=settings.search_text_scan_limit,
            max_frequency=settings.search_text_max_frequency,
            exact_below=settings.search_exact_below,
        )


@dataclass(frozen=True)
class Ranked:
    """A row's fused score and its best rank in each ranking (None: not found by it)."""

    score: float
    vector_rank: int | None
    text_rank: int | None
    entity_rank: int | None = None

    @property
    def rankers(self) -> list[str]:
        found = []
        if self.vector_rank is not None:
            found.append("vector")
        if self.text_rank is not None:
            found.append("text")
        if self.entity_rank is not None:
            found.append("entity")
        return found
