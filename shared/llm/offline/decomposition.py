"""Query decomposition for the `offline` provider: a search query split into at most
`MAX_QUERIES` single-topic sub-queries.

The query splits after each "?", at ";", and at "and"/"but" (with or without a
comma) when what follows starts a question or a clause of its own ("what",
"which", "how", "do", "is", "I", "my", ...): "What is my UI theme and which
database do I use?" → "What is my UI theme?", "Which database do I use?"; "the
difference between TCP and UDP" stays whole. Past the bound, the remaining
pieces join the last sub-query. Each sub-query gets the query's "?" when it was
a question and a capital letter, and its references to a session made explicit
(`shared.llm.offline.session_refs`): "in my previous session" → "in session <prev>".
A query that does not split is its own only sub-query (with its references to a
session made explicit too).
"""

from __future__ import annotations

import re

from shared.llm.offline.phrasing import capitalise, word_set
from shared.llm.offline.session_refs import rewrite_session_refs

MAX_QUERIES = 4

_STARTS = sorted(
    word_set(
        "what which who whom whose where when why how do does did is are was were can could "
        "should will would have has i i'm i've my we our"
    )
)
_SPLIT = re.compile(
    r"(?<=\?)\s+|\s*;\s*|,?\s+(?:and|but)\s+(?=(?:also\s+)?(?:" + "|".join(_STARTS) + r")\b)",
    re.I,
)


def decompose_query(query: str, session_id: str, prev_session_id: str) -> list[str]:
    whole = " ".join(query.split())
    pieces = [p.strip(" ,") for p in _SPLIT.split(whole) if p and p.strip(" ,")]
    if len(pieces) <= 1:
        return [rewrite_session_refs(whole, session_id, prev_session_id)]
    if len(pieces) > MAX_QUERIES:
        pieces[MAX_QUERIES - 1 :] = [" ".join(pieces[MAX_QUERIES - 1 :])]
    queries = []
    for piece in pieces:
        if whole.endswith("?") and not piece.endswith(("?", ".", "!")):
            piece += "?"
        queries.append(capitalise(rewrite_session_refs(piece, session_id, prev_session_id)))
    return queries
