"""The archive's searches: its episodes ranked by the hybrid statement
(`shared.db.search`), within a period first, and the turns around them in their
sessions (what `archive:search` returns as a hit's `context`, and what the turn's
context may add to a recalled turn).

`recall` is the context's: the hits and, in the same statement, the turns next to
each; the archive search asks for the turns around its hits on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.db.run import Statement, Steps
from shared.db.search import fusion_params, hybrid_parts, hybrid_sql, split_ranked
from shared.db.search_entities import entity_params
from shared.db.search_filters import SCOPE_SIZES, episode_filter
from shared.memory.ranking import Fusion, Ranked, Scope

EPISODE_COLUMNS = "m.id::text AS id, m.turn_id, m.session_id, m.project_id, m.created_at, m.text"
# The turns before (`sign` -1) or after (1) the episode `{e}` (an alias with its
# session, time and turn id) in its session that the scope may see: a session can
# hold turns of several projects.
_SIDE = """(
        SELECT {sign} * row_number() OVER (ORDER BY m.created_at {order}, m.turn_id {order})
                   AS offset_, m.id, m.turn_id, m.project_id, m.created_at, m.text
        FROM episodes m
        WHERE m.app = %(app)s AND m.user_id = %(user_id)s AND m.session_id = {e}.session_id
          AND m.project_id IN (%(project_id)s, '')
          AND (m.created_at, m.turn_id) {cmp} ({e}.created_at, {e}.turn_id)
        ORDER BY m.created_at {order}, m.turn_id {order} LIMIT %(turns)s
    )"""


def _around(e: str) -> str:
    return f"""{_SIDE.format(sign=-1, order="DESC", cmp="<", e=e)}
            UNION ALL
            {_SIDE.format(sign=1, order="ASC", cmp=">", e=e)}"""


Hits = list[tuple[dict[str, Any], Ranked]]
# Per hit (its episode id), the turns around it (`surrounding_turns`).
Around = dict[str, list[dict[str, Any]]]
# (before, after): the creation times a search's episodes lie between, both
# exclusive; None for no bound.
Period = tuple[datetime | None, datetime | None]


@dataclass(frozen=True)
class _Ranking:
    """What a hybrid search of the archive ranks by: `scope`'s episodes, for `query`
    and its `embedding`, the top `k` as `fusion` fuses them."""

    scope: Scope
    query: str
    embedding: Any
    k: int
    fusion: Fusion

    def where(self, period: Period) -> tuple[str, dict[str, Any]]:
        """The filter and the parameters of the search of the episodes created in
        `period`."""
        where, params = episode_filter(self.scope, *period)
        params.update(fusion_params(self.fusion, [self.embedding], [self.query], self.k))
        params.update(entity_params(self.scope, [self.query]))
        return where, params


def search_episodes(
    scope: Scope,
    query: str,
    embedding: Any,
    k: int,
    fusion: Fusion,
    before: datetime | None = None,
    after: datetime | None = None,
) -> Steps[Hits]:
    """The fused top-k episodes `scope` may see: each as its `EPISODE_COLUMNS`."""
    where, params = _Ranking(scope, query, embedding, k, fusion).where((before, after))
    entities = fusion.entity_weight > 0
    sql = hybrid_sql("episodes", EPISODE_COLUMNS, where, entities=entities, as_of="as_of" in params)
    rows = yield Statement(sql, params)
    return [split_ranked(row)[:2] for row in rows]


def search_episodes_within(
    scope: Scope,
    query: str,
    embedding: Any,
    k: int,
    fusion: Fusion,
    start: datetime,
    end: datetime,
) -> Steps[Hits]:
    """The top-k episodes created in [`start`, `end`) and, if there are fewer
    than k, the best of the rest of the archive after them."""

    def search(period: Period) -> Steps[tuple[Hits, Around]]:
        return (yield from search_episodes(scope, query, embedding, k, fusion, *period)), {}

    hits, _ = yield from _period_first(search, k, start, end)
    return hits


def _period_first(
    search: Callable[[Period], Steps[tuple[Hits, Around]]],
    k: int,
    start: datetime | None,
    end: datetime | None,
) -> Steps[tuple[Hits, Around]]:
    """`search`'s top-k of [`start`, `end`) and, if they are fewer than k, the best
    of the rest after them, with the turns around each (none without a period:
    the top-k of the whole archive)."""
    if start is None or end is None:
        return (yield from search((None, None)))
    # The filter's `after` is exclusive; the period's start is not.
    inside, around = yield from search((end, start - timedelta(microseconds=1)))
    if len(inside) >= k:
        return inside, around
    seen = {fields["id"] for fields, _ in inside}
    rest, rest_around = yield from search((None, None))
    more = [hit for hit in rest if hit[0]["id"] not in seen][: k - len(inside)]
    around |= {fields["id"]: rest_around.get(fields["id"], []) for fields, _ in more}
    return inside + more, around


def surrounding_turns(
    scope: Scope, hits: list[str], turns: int
) -> Steps[dict[str, list[dict[str, Any]]]]:
    """Per hit (an episode id of `scope`'s user), up to `turns` turns of its session
    before it and after it, in the session's order, each with its `offset` from
    the hit (-2, -1, 1, 2, ...)."""
    if not hits or turns == 0:
        return {}
    rows = yield Statement(
        f"""
        SELECT e.id::text AS hit, s.offset_ AS offset, s.id::text AS id, s.turn_id,
               s.created_at, s.text
        FROM episodes e CROSS JOIN LATERAL (
            {_around("e")}
        ) s
        WHERE e.id = ANY(%(hits)s::uuid[]) AND e.app = %(app)s AND e.user_id = %(user_id)s
        ORDER BY e.id, s.offset_
        """,
        {
            "hits": hits,
            "turns": turns,
            "app": scope.app,
            "user_id": scope.user_id,
            "project_id": scope.project_id,
        },
    )
    around: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        around.setdefault(row.pop("hit"), []).append(row)
    return around


def recall(
    scope: Scope,
    query: str,
    embedding: Any,
    k: int,
    fusion: Fusion,
    turns: int,
    start: datetime | None = None,
    end: datetime | None = None,
) -> Steps[tuple[Hits, Around]]:
    """The top-k episodes (those created in [`start`, `end`) first, then, if
    they are fewer than k, the best of the rest) and per hit the `turns` turns of
    its session before and after it (as `surrounding_turns`): one statement, two
    when a period holds fewer than k."""

    ranking = _Ranking(scope, query, embedding, k, fusion)

    def search(period: Period) -> Steps[tuple[Hits, Around]]:
        return _recall_once(ranking, turns, period)

    return (yield from _period_first(search, k, start, end))


def _recall_once(ranking: _Ranking, turns: int, period: Period) -> Steps[tuple[Hits, Around]]:
    scope, fusion = ranking.scope, ranking.fusion
    where, params = ranking.where(period)
    params["turns"] = turns
    # Whether the scope's whole archive is small enough to rank exactly, as a
    # recent search found: a period's share of it is smaller still.
    sized = SCOPE_SIZES.archive_key(scope, fusion.exact_below)
    exact = SCOPE_SIZES.cached(sized)
    fused, ranked, _exact = hybrid_parts(
        "episodes", EPISODE_COLUMNS, where, None, exact, fusion.entity_weight > 0, "as_of" in params
    )
    neighbours = (
        f"""
UNION ALL
SELECT s.id::text, s.turn_id, h.session_id, s.project_id, s.created_at, s.text,
       NULL, NULL, NULL, NULL, false, false, h.id, s.offset_
FROM hits h CROSS JOIN LATERAL (
    {_around("h")}
) s"""
        if turns
        else ""
    )
    rows = yield Statement(
        f"""{fused},
hits AS MATERIALIZED {ranked}
SELECT h.*, NULL::text AS hit, 0::bigint AS offset_ FROM hits h{neighbours}""",
        params,
        # A scope known to be small is ranked exactly: its plan is the same for any
        # user's (their rows by the user's index, the words by the text index), and
        # planning it anew took longer than running it.
        generic_plan=bool(exact),
    )
    first_hit = next((row for row in rows if row["hit"] is None), None)
    if exact is None and first_hit is not None and period == (None, None):
        SCOPE_SIZES.store(sized, bool(first_hit["exact"]))
    hits: Hits = []
    around: Around = {}
    for row in rows:
        hit, offset = row.pop("hit"), row.pop("offset_")
        if hit is None:
            columns, row_ranked, _pinned = split_ranked(row)
            hits.append((columns, row_ranked))
        else:
            for name in ("score", "vrank", "trank", "erank", "pinned", "exact"):
                row.pop(name)
            around.setdefault(hit, []).append({**row, "offset": offset})
    hits.sort(key=lambda hit: (-hit[1].score, hit[0]["id"]))
    for listed in around.values():
        listed.sort(key=lambda turn: turn["offset"])
    return hits, around
