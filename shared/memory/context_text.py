"""The context's `system_instruction`: its sections, their headings and lines, and
how the session's part (the pinned rules, the summary, the recent turns) is fitted
to the budget and the caller's caps before anything else is added.

The text is a header, then each section that has lines: `## Title`, then its
lines. Sections in this order: rules, summary, recent turns, profile, memories,
long-term summaries, recalled turns (under a `### Session …` heading per session).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.tokens import clip_to_tokens, estimate_tokens

HEADER = (
    "You are talking with a returning user. Use what follows as memory of them; "
    "the rules are constraints you must follow."
)
# Every section the context has, in the instruction's order; each one's cap (a
# number of tokens, headings included) is the caller's to set, 0 turns it off.
SECTIONS = (
    "rules",
    "summary",
    "recent_turns",
    "profile",
    "memories",
    "long_term_summaries",
    "recalled_turns",
)
TITLES = {
    "rules": "## Rules (always apply)",
    "recent_turns": "## Recent turns",
    "profile": "## The user's profile",
    "memories": "## What you remember about the user",
    "long_term_summaries": "## Summaries of older conversations",
    "recalled_turns": "## From earlier conversations",
}
SUMMARY_TITLE = "## Summary of this session so far"


def carried_title(session_id: str) -> str:
    return f"## Summary of the previous session ({session_id})"


def render(sections: list[tuple[str, list[str]]]) -> str:
    """The header and each (title, lines) section that has lines."""
    parts = [HEADER]
    parts += ["\n".join([title, *lines]) for title, lines in sections if lines]
    return "\n\n".join(parts)


@dataclass
class SessionPart:
    """The session's part as it goes into the instruction: the rules (newest last
    to go), the summary and its title, and the recent turns (oldest first)."""

    rules: list[str]
    summary: str
    summary_title: str
    turns: list[str]
    omitted: dict[str, int] = field(default_factory=dict)

    def sections(self) -> list[tuple[str, list[str]]]:
        return [
            (TITLES["rules"], [f"- {r}" for r in self.rules]),
            (self.summary_title, [self.summary] if self.summary else []),
            (TITLES["recent_turns"], self.turns),
        ]

    def tokens(self) -> int:
        return estimate_tokens(render(self.sections()))

    def fit(self, budget: int, caps: Mapping[str, int]) -> None:
        """Within each section's cap, then within `budget` as a whole: the oldest
        recent turns go first, then the summary is clipped, then the rules go from
        the newest. What is dropped is counted in `omitted`."""
        omitted = {"rules": 0, "summary": 0, "recent_turns": 0}
        if "recent_turns" in caps:
            while self.turns and self._section_tokens(2) > caps["recent_turns"]:
                self.turns.pop(0)
                omitted["recent_turns"] += 1
        if "summary" in caps and self.summary and self._section_tokens(1) > caps["summary"]:
            title = estimate_tokens("\n\n" + self.summary_title + "\n")
            self._clip(max(0, caps["summary"] - title), omitted)
        if "rules" in caps:
            while self.rules and self._section_tokens(0) > caps["rules"]:
                self.rules.pop()
                omitted["rules"] += 1
        while self.tokens() > budget and self.turns:
            self.turns.pop(0)
            omitted["recent_turns"] += 1
        if self.tokens() > budget and self.summary:
            without = SessionPart(self.rules, "", self.summary_title, self.turns)
            self._clip(max(0, budget - without.tokens() - 12), omitted)
        while self.tokens() > budget and self.rules:
            self.rules.pop()
            omitted["rules"] += 1
        self.omitted = {k: v for k, v in omitted.items() if v}

    def section_tokens(self) -> dict[str, int]:
        """Each section's tokens, its title and the break before it included."""
        names = ("rules", "summary", "recent_turns")
        return {
            name: estimate_tokens("\n\n" + "\n".join([title, *lines])) if lines else 0
            for name, (title, lines) in zip(names, self.sections(), strict=True)
        }

    def _section_tokens(self, index: int) -> int:
        return list(self.section_tokens().values())[index]

    def _clip(self, tokens: int, omitted: dict[str, int]) -> None:
        clipped = clip_to_tokens(self.summary, tokens)
        if clipped != self.summary:
            omitted["summary"] = 1
        self.summary = clipped
