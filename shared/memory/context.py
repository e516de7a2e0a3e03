"""The context of a turn: the session's part (Valkey) and the long-term part
(Postgres: `shared.memory.long_term`) read at once, and its `system_instruction`
assembled within one token budget.

Either part may fail; the context is then built without it and says so
(`Context.failures`). The budget goes first to the session's part: the pinned
rules, the rolling (or carried) summary and the recent turns, fitted as
`context_text.SessionPart.fit` says. What it leaves is filled with the memories,
the recalled turns and the long-term summaries, chosen together by relevance per
token with diversity across sessions (`context_budget.choose`). `omitted` counts
what did not fit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from shared.db.context_reads import Cited
from shared.db.memory_rows import MemoryRow
from shared.db.profiles import ProfileValueRow, profile_of
from shared.memory.context_budget import NEIGHBOUR, Candidate, Chosen, choose
from shared.memory.context_text import (
    SUMMARY_TITLE,
    TITLES,
    SessionPart,
    carried_title,
    render,
)
from shared.memory.episode_keys import when_in_words
from shared.memory.filters import Node
from shared.memory.long_term import LongTerm, LongTermQuery, LongTermSummary, read_long_term
from shared.memory.periods import Period
from shared.memory.ranking import Scope
from shared.memory.search import Found, FoundEpisode, MemorySearch
from shared.profiles.schema import shown as value_text
from shared.session_buffer import (
    AsyncSessionBuffer,
    BufferedTurn,
    SessionKey,
    SessionOfAnotherAgent,
    SessionView,
    Summary,
)
from shared.tokens import clip_to_tokens, estimate_tokens

# The archive's hits a context weighs: one per this many tokens of its budget.
TOKENS_PER_HIT = 200
MIN_HITS = 5
# A profile field's relevance: ahead of the best memory (1), so the profile goes in
# first, a field at a time, while it fits.
PROFILE_RELEVANCE = 2.0


def recall_hits(budget: int, most: int) -> int:
    """How many archived turns a context of `budget` tokens weighs (`most` 0: none)."""
    return min(most, max(MIN_HITS, budget // TOKENS_PER_HIT))


@dataclass(frozen=True)
class ContextQuery:
    """What a context is built for: the session (`scope.session_id`) and the
    session it continues, the query, how many memories and archived turns to
    weigh, the budget and the caller's caps per section (tokens; 0: off), the
    number of recent turns, and when it is asked (the periods the query names are
    read against it)."""

    scope: Scope
    prev_session_id: str
    query: str
    k: int
    budget: int
    recent_turns: int
    asked_at: datetime
    hits: int = 0
    neighbours: int = 1
    caps: Mapping[str, int] = field(default_factory=dict)
    matching: Node | None = None  # the caller's filter of the memories and rules


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    text: str
    version: int


@dataclass(frozen=True, slots=True)
class RecalledTurn:
    """An archived turn the context carries: a hit of the archive search (`rank`
    from 1, its fused score) or a neighbour of one (`neighbour_of`: the hit's
    turn id)."""

    id: str
    turn_id: str
    session_id: str
    project_id: str
    created_at: datetime
    text: str
    rank: int | None = None
    score: float | None = None
    rankers: tuple[str, ...] = ()
    neighbour_of: str | None = None


@dataclass(frozen=True)
class Built:
    text: str
    tokens: int
    omitted: dict[str, int] = field(default_factory=dict)
    by_section: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    rolling: SessionSummary | None
    carried: SessionSummary | None
    turns: list[BufferedTurn]
    rules: list[MemoryRow]
    memories: list[Found]
    recalled: list[RecalledTurn]
    summaries: list[LongTermSummary]
    cited: dict[str, Cited]
    period: Period | None
    built: Built
    # The parts that could not be read ("session", "profile", "memories",
    # "recalled_turns"), and why.
    failures: dict[str, BaseException]
    profile: list[ProfileValueRow] = field(default_factory=list)

    @property
    def degraded(self) -> list[str]:
        return list(self.failures)


async def build_context(
    query: ContextQuery, buffer: AsyncSessionBuffer, search: MemorySearch
) -> Context:
    """The session part and the long-term part at once; each may fail alone."""
    wanted = query.caps
    long_term_query = LongTermQuery(
        scope=query.scope,
        query=query.query,
        k=query.k,
        hits=query.hits if wanted.get("recalled_turns") != 0 else 0,
        neighbours=query.neighbours,
        summaries=wanted.get("long_term_summaries") != 0,
        asked_at=query.asked_at,
        matching=query.matching,
    )
    session, long_term, profile = await asyncio.gather(
        _session_part(query, buffer),
        read_long_term(long_term_query, search),
        _profile_part(query, search),
        return_exceptions=True,
    )
    failures: dict[str, BaseException] = {}
    if isinstance(profile, BaseException):
        failures["profile"] = profile
        profile = []
    view, carried = None, None
    if isinstance(session, SessionOfAnotherAgent):
        raise session  # a refusal, not an outage
    if isinstance(session, BaseException):
        failures["session"] = session
    else:
        view, carried = session
    if isinstance(long_term, BaseException):
        raise long_term  # read_long_term reports outages in `failures`: this is a bug
    failures.update(long_term.failures)
    return _assembled(query, view, carried, long_term, failures, profile)


async def _profile_part(query: ContextQuery, search: MemorySearch) -> list[ProfileValueRow]:
    """The user's profile (one read, no search), unless the caller turned it off."""
    if query.caps.get("profile") == 0:
        return []
    return await search.run(profile_of(query.scope.app, query.scope.user_id))


async def _session_part(
    query: ContextQuery, buffer: AsyncSessionBuffer
) -> tuple[SessionView, Summary | None]:
    """The session's view and the summary of the session it continues (the one
    the query names, else the one the session recorded), if any."""
    scope = query.scope
    view = await buffer.read(SessionKey(scope.app, scope.user_id, scope.session_id))
    if not view.serves(scope.agent_id):
        raise SessionOfAnotherAgent(scope.session_id, scope.agent_id)
    carried = None
    prev = query.prev_session_id or view.prev_session_id
    if prev:
        previous = SessionKey(scope.app, scope.user_id, prev)
        carried = await buffer.read_summary(previous, scope.agent_id)
    return view, carried


def _assembled(
    query: ContextQuery,
    view: SessionView | None,
    carried: Summary | None,
    long_term: LongTerm,
    failures: dict[str, BaseException],
    profile: list[ProfileValueRow],
) -> Context:
    rolling = (
        SessionSummary(query.scope.session_id, view.summary.text, view.summary.version)
        if view is not None and view.summary.version
        else None
    )
    carried_summary = (
        SessionSummary(query.prev_session_id or view.prev_session_id, carried.text, carried.version)
        if carried is not None and carried.version and view is not None
        else None
    )
    wanted = query.recent_turns
    turns = list(view.turns)[-wanted:] if view is not None and wanted else []
    summary = rolling or carried_summary
    part = SessionPart(
        rules=[m.text for m in long_term.rules],
        summary=summary.text if summary else "",
        summary_title=SUMMARY_TITLE
        if rolling
        else carried_title(summary.session_id if summary else ""),
        turns=[f"User: {t.user}\nAssistant: {t.assistant}" for t in turns],
    )
    part.fit(query.budget, query.caps)
    turns = turns[len(turns) - len(part.turns) :] if part.turns else []
    rules = long_term.rules[: len(part.rules)]
    fixed = part.tokens()
    shown = {(query.scope.session_id, t.turn_id) for t in turns}
    room = max(0, query.budget - fixed)
    candidates, recalled = _candidates(long_term, shown, room)
    candidates += [
        Candidate("profile", f"profile:{row.field}", PROFILE_RELEVANCE, _profile_line(row))
        for row in profile
    ]
    chosen = choose(candidates, room, TITLES, query.caps)
    built = _built(query.budget, part, chosen, candidates, recalled)
    taken = {c.key for c in chosen.taken}
    return Context(
        rolling,
        carried_summary,
        turns,
        rules,
        [f for f in long_term.memories if f.memory.id in taken],
        _in_order([recalled[c.key] for c in chosen.taken if c.key in recalled]),
        [f for f in long_term.summaries if f.memory.id in taken],
        long_term.cited,
        long_term.period,
        built,
        failures,
        [row for row in profile if f"profile:{row.field}" in taken],
    )


def _profile_line(row: ProfileValueRow) -> str:
    return f"- {row.field.replace('_', ' ')}: {value_text(row.value)}"


def _candidates(
    long_term: LongTerm, shown: set[tuple[str, str]], room: int
) -> tuple[list[Candidate], dict[str, RecalledTurn]]:
    """Every memory, long-term summary and archived turn the context may carry,
    and the turns by episode id. A turn a memory came from is that memory's (shown
    once, as the memory); the asking session's recent turns are never recalled."""
    candidates: dict[str, Candidate] = {}
    carried_by: dict[str, str] = {}  # episode id -> the memory that carries it
    for rule in long_term.rules:
        for source in long_term.cited.get(rule.id, Cited(0)).sources:
            carried_by.setdefault(source.episode_id, rule.id)
    for rank, found in enumerate(long_term.memories, start=1):
        memory = found.memory
        line = f"- [{memory.scope} {memory.kind}] {memory.text}"
        candidates[memory.id] = Candidate("memories", memory.id, 1 / rank, line)
        for source in long_term.cited.get(memory.id, Cited(0)).sources:
            carried_by.setdefault(source.episode_id, memory.id)
    for summary in long_term.summaries:
        relevance = 1.0 if summary.rank is None else 1 / summary.rank
        # One summary never takes more than half of what is left.
        text = clip_to_tokens(summary.memory.text, max(1, room // 2))
        candidates[summary.memory.id] = Candidate(
            "long_term_summaries", summary.memory.id, relevance, f"- {text}"
        )
    recalled: dict[str, RecalledTurn] = {}
    headings: dict[str, str] = {}
    for rank, episode in enumerate(long_term.hits, start=1):
        hit = _hit(episode, rank)
        if (hit.session_id, hit.turn_id) in shown:
            continue
        # The neighbours of a hit a memory carries wait for that memory.
        shown_as = carried_by.get(hit.id, hit.id)
        around = [(hit, 0)] + [
            (_neighbour(row, hit), row["offset"]) for row in long_term.around.get(hit.id, [])
        ]
        for turn, offset in around:
            if turn.id in carried_by or (turn.session_id, turn.turn_id) in shown:
                continue
            relevance = NEIGHBOUR ** abs(offset) / rank
            known = candidates.get(turn.id)
            if known is not None and offset and (known.counted or known.relevance >= relevance):
                continue  # a hit stays a hit; a neighbour keeps its best hit
            if known is not None and not offset:
                relevance = max(relevance, known.relevance)
            recalled[turn.id] = turn
            heading = headings.get(turn.session_id)
            if heading is None:
                heading = f"### Session {turn.session_id}, {when_in_words(turn.created_at)}"
                headings[turn.session_id] = heading
            candidates[turn.id] = Candidate(
                "recalled_turns",
                turn.id,
                relevance,
                turn.text,
                group=heading,
                needs=shown_as if offset else "",
                spread=turn.session_id,
                counted=not offset,
            )
    return list(candidates.values()), recalled


def _hit(found: FoundEpisode, rank: int) -> RecalledTurn:
    fields = found.fields
    return RecalledTurn(
        fields["id"],
        fields["turn_id"],
        fields["session_id"],
        fields["project_id"],
        fields["created_at"],
        fields["text"],
        rank=rank,
        score=round(found.ranked.score, 6),
        rankers=tuple(found.ranked.rankers),
    )


def _neighbour(row: dict, hit: RecalledTurn) -> RecalledTurn:
    return RecalledTurn(
        row["id"],
        row["turn_id"],
        hit.session_id,
        row["project_id"],
        row["created_at"],
        row["text"],
        neighbour_of=hit.turn_id,
    )


def _in_order(turns: list[RecalledTurn]) -> list[RecalledTurn]:
    """Recalled turns as the instruction shows them: sessions by their first turn
    shown, each session's turns in order."""
    first: dict[str, datetime] = {}
    for t in turns:
        first[t.session_id] = min(first.get(t.session_id, t.created_at), t.created_at)
    return sorted(turns, key=lambda t: (first[t.session_id], t.session_id, t.created_at, t.turn_id))


def _built(
    budget: int,
    part: SessionPart,
    chosen: Chosen,
    candidates: list[Candidate],
    recalled: dict[str, RecalledTurn],
) -> Built:
    by_key = {c.key: c for c in chosen.taken}
    sections = part.sections()
    # The profile's fields in the schema's order; the rest in the order chosen.
    sections.append(
        (
            TITLES["profile"],
            [c.line for c in candidates if c.key in by_key and c.section == "profile"],
        )
    )
    for name in ("memories", "long_term_summaries"):
        sections.append((TITLES[name], [c.line for c in chosen.taken if c.section == name]))
    lines: list[str] = []
    group = ""
    for turn in _in_order([recalled[c.key] for c in chosen.taken if c.section == "recalled_turns"]):
        candidate = by_key[turn.id]
        if candidate.group != group:
            group = candidate.group
            lines.append(group)
        lines.append(candidate.line)
    sections.append((TITLES["recalled_turns"], lines))
    text = render(sections)
    omitted = dict(part.omitted)
    omitted.update(chosen.omitted(candidates))
    by_section = {name: tokens for name, tokens in part.section_tokens().items() if tokens}
    by_section.update(chosen.by_section)
    return Built(text, estimate_tokens(text), omitted, by_section)
