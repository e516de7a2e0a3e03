"""The context of a turn: the session's part (Valkey) and the long-term part
(Postgres) read at once, and its `system_instruction` assembled within a token
budget.

Either part may fail; the context is then built without it and says so
(`Context.failures`). The instruction's order of priority (docs/design.md, "The
read path"): pinned rules, then the rolling (or carried) summary, then the
recent turns, then the retrieved memories. When the budget runs out, the lowest
priority goes first: memories from the least relevant, then the oldest recent
turns, then the summary is clipped; rules are dropped last, from the newest.
`omitted` counts what did not fit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from shared.db.memories import MemoryRow
from shared.memory.retrieval import Found, MemorySearch
from shared.memory.search import Scope
from shared.session_buffer import AsyncSessionBuffer, BufferedTurn, SessionKey, SessionView, Summary
from shared.tokens import clip_to_tokens, estimate_tokens

HEADER = (
    "You are talking with a returning user. Use what follows as memory of them; "
    "the rules are constraints you must follow."
)


@dataclass
class Built:
    text: str
    tokens: int
    omitted: dict[str, int] = field(default_factory=dict)


def _section(title: str, lines: list[str]) -> str:
    return f"## {title}\n" + "\n".join(lines)


def assemble(
    *,
    rules: list[str],
    summary: str,
    carried: str,
    carried_from: str,
    turns: list[tuple[str, str]],
    memories: list[str],
    budget: int,
) -> Built:
    omitted = {"rules": 0, "summary": 0, "recent_turns": 0, "memories": 0}

    def render(
        rule_lines: list[str], summary_text: str, turn_lines: list[str], memory_lines: list[str]
    ) -> str:
        parts = [HEADER]
        if rule_lines:
            parts.append(_section("Rules (always apply)", [f"- {r}" for r in rule_lines]))
        if summary_text:
            title = (
                f"Summary of the previous session ({carried_from})"
                if not summary and carried
                else "Summary of this session so far"
            )
            parts.append(_section(title, [summary_text]))
        if turn_lines:
            parts.append(_section("Recent turns", turn_lines))
        if memory_lines:
            parts.append(
                _section("What you remember about the user", [f"- {m}" for m in memory_lines])
            )
        return "\n\n".join(parts)

    rule_lines = list(rules)
    summary_text = summary or carried
    turn_lines = [f"User: {u}\nAssistant: {a}" for u, a in turns]
    memory_lines = list(memories)

    def size() -> int:
        return estimate_tokens(render(rule_lines, summary_text, turn_lines, memory_lines))

    while size() > budget and memory_lines:
        memory_lines.pop()
        omitted["memories"] += 1
    while size() > budget and turn_lines:
        turn_lines.pop(0)
        omitted["recent_turns"] += 1
    if size() > budget and summary_text:
        rest = budget - estimate_tokens(render(rule_lines, "", turn_lines, memory_lines)) - 12
        clipped = clip_to_tokens(summary_text, max(0, rest))
        if clipped != summary_text:
            omitted["summary"] = 1
        summary_text = clipped
    while size() > budget and rule_lines:
        rule_lines.pop()
        omitted["rules"] += 1
    text = render(rule_lines, summary_text, turn_lines, memory_lines)
    return Built(text, estimate_tokens(text), {k: v for k, v in omitted.items() if v})


@dataclass(frozen=True)
class ContextQuery:
    """What a context is built for: the session (`scope.session_id`) and the
    session it continues, the query its memories are searched with, how many,
    and the instruction's budget and number of recent turns."""

    scope: Scope
    prev_session_id: str
    query: str
    k: int
    budget: int
    recent_turns: int


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    text: str
    version: int


@dataclass(frozen=True)
class Context:
    rolling: SessionSummary | None
    carried: SessionSummary | None
    turns: list[BufferedTurn]
    rules: list[MemoryRow]
    memories: list[Found]
    built: Built
    # The parts that could not be read ("session", "memories"), and why.
    failures: dict[str, BaseException]

    @property
    def degraded(self) -> list[str]:
        return list(self.failures)


async def build_context(
    query: ContextQuery, buffer: AsyncSessionBuffer, search: MemorySearch
) -> Context:
    """The session part and the memory part at once; each may fail alone."""
    session, recalled = await asyncio.gather(
        _session_part(query, buffer),
        search.memories(query.scope, [query.query], query.k, pinned=True),
        return_exceptions=True,
    )
    failures: dict[str, BaseException] = {}
    view, carried = None, None
    if isinstance(session, BaseException):
        failures["session"] = session
    else:
        view, carried = session
    found, rules = [], []
    if isinstance(recalled, BaseException):
        failures["memories"] = recalled
    else:
        found, rules = recalled
        # A rule both pinned and found goes into the instruction once, as a rule.
        pinned = {rule.id for rule in rules}
        found = [f for f in found if f.memory.id not in pinned]
    return _assembled(query, view, carried, rules, found, failures)


async def _session_part(
    query: ContextQuery, buffer: AsyncSessionBuffer
) -> tuple[SessionView, Summary | None]:
    """The session's view and the summary of the session it continues (the one
    the query names, else the one the session recorded), if any."""
    scope = query.scope
    view = await buffer.read(SessionKey(scope.app, scope.user_id, scope.session_id))
    carried = None
    prev = query.prev_session_id or view.prev_session_id
    if prev:
        carried = await buffer.read_summary(SessionKey(scope.app, scope.user_id, prev))
    return view, carried


def _assembled(
    query: ContextQuery,
    view: SessionView | None,
    carried: Summary | None,
    rules: list[MemoryRow],
    found: list[Found],
    failures: dict[str, BaseException],
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
    built = assemble(
        rules=[m.text for m in rules],
        summary=rolling.text if rolling else "",
        carried=carried_summary.text if carried_summary else "",
        carried_from=carried_summary.session_id if carried_summary else "",
        turns=[(t.user, t.assistant) for t in turns],
        memories=[f"[{f.memory.scope} {f.memory.kind}] {f.memory.text}" for f in found],
        budget=query.budget,
    )
    return Context(rolling, carried_summary, turns, rules, found, built, failures)
