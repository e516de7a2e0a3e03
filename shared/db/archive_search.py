"""The archive's searches: its episodes ranked by the hybrid statement
(`shared.db.search`), within a period first, and the turns around them in their
sessions (what `archive:search` returns as a hit's `context`, and what the turn's
context may add to a recalled turn).

`recall` is the context's: the hits and, in the same statement, the turns next to
each; the archive search asks for the turns around its hits on its own.
"""

from __future__ import annotations

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


def search_episodes(
    scope: Scope,
    query: str,
    embedding: Any,
    k: int,
    fusion: Fusion,
    before: datetime | None = None,
    after: datetime | None = None,
) -> Steps[list[tuple[dict[str, Any], Ranked]]]:
    """The fused top-k episodes `scope` may see: each as its `EPISODE_COLUMNS`."""
    where, params = episode_filter(scope, before, after)
    params.update(fusion_params(fusion, [embedding], [query], k))
    params.update(entity_params(scope, [query]))
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
) -> Steps[list[tuple[dict[str, Any], Ranked]]]:
    """The top-k episodes created in [`start`, `end`) and, if there are fewer
    than k, the best of the rest of the archive after them."""
    # The filter's `after` is exclusive; the period's start is not.
    inside = yield from search_episodes(
        scope, query, embedding, k, fusion, before=end, after=start - timedelta(microseconds=1)
    )
    if len(inside) >= k:
        return inside
    seen = {fields["id"] for fields, _ in inside}
    rest = yield from search_episodes(scope, query, embedding, k, fusion)
    return inside + [hit for hit in rest if hit[0]["id"] not in seen][: k - len(inside)]


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
) -> Steps[tuple[list[tuple[dict[str, Any], Ranked]], dict[str, list[dict[str, Any]]]]]:
    """The top-k episodes (those created in [`start`, `end`) first, then, if
    they are fewer than k, the best of the rest) and per hit the `turns` turns of
    its session before and after it (as `surrounding_turns`): one statement, two
    when a period holds fewer than k."""
    if start is None or end is None:
        return (yield from _recall_once(scope, query, embedding, k, fusion, turns, None, None))
    inside, around = yield from _recall_once(
        scope, query, embedding, k, fusion, turns, end, start - timedelta(microseconds=1)
    )
    if len(inside) >= k:
        return inside, around
    seen = {fields["id"] for fields, _ in inside}
    rest, rest_around = yield from _recall_once(
        scope, query, embedding, k, fusion, turns, None, None
    )
    more = [hit for hit in rest if hit[0]["id"] not in seen][: k - len(inside)]
    around |= {fields["id"]: rest_around.get(fields["id"], []) for fields, _ in more}
    return inside + more, around


def _recall_once(
    scope: Scope,
    query: str,
    embedding: Any,
    k: int,
    fusion: Fusion,
    turns: int,
    before: datetime | None,
    after: datetime | None,
) -> Steps[tuple[list[tuple[dict[str, Any], Ranked]], dict[str, list[dict[str, Any]]]]]:
    where, params = episode_filter(scope, before, after)
    params.update(fusion_params(fusion, [embedding], [query], k))
    params.update(entity_params(scope, [query]))
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
    if exact is None and first_hit is not None and before is None and after is None:
        SCOPE_SIZES.store(sized, bool(first_hit["exact"]))
    hits: list[tuple[dict[str, Any], Ranked]] = []
    around: dict[str, list[dict[str, Any]]] = {}
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
