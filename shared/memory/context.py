"""The `system_instruction` of a context, assembled within a token budget.

Order of priority (docs/design.md, "The read path"): pinned rules, then the
rolling (or carried) summary, then the recent turns, then the retrieved memories. When the budget
runs out, the lowest priority goes first: memories from the least relevant,
then the oldest recent turns, then the summary is clipped; rules are dropped
last, from the newest. `omitted` counts what did not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
