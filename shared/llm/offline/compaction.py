"""Compaction by the `offline` provider: old episodes folded into a user's long-term
summary, extractively and deterministically.

The previous summary comes first and is kept whole, verbatim: its facts have
priority and nothing it holds is ever dropped (docs/design.md, "Compaction").
From the episodes, the sentences that state a constraint, a choice or a goal (the
classes of `shared.llm.offline.summary.importance`) are added, prefixed with who said them, the most
important first and the oldest first within a class, as long as the summary stays
within `max_tokens` by the one estimator (but the episodes always get at least a
quarter of it); they appear in the order they were said.
A sentence the summary already holds is not added again. A batch that states
nothing worth keeping leaves one line of gist, so the summary still shows it
existed.

When the previous summary is near or over the bound it is kept whole all the same,
and the episodes still add up to a quarter of the bound: the summary grows past
its bound rather than drop facts that are no longer anywhere else (the episodes
are deleted once folded).
"""

from __future__ import annotations

from shared.llm.base import DialogueTurn
from shared.llm.offline.summary import new_lines, normalised, sentences


def compact_episodes(previous: str, episodes: list[DialogueTurn], max_tokens: int) -> str:
    """The previous summary with the most important sentences of `episodes` added."""
    previous = previous.strip()
    held = normalised(previous)
    # (importance, position, line)
    new = [(level, i, line) for i, (level, line) in enumerate(new_lines(held, episodes))]
    if not new:
        gist = _gist(episodes)
        if gist and normalised(gist) not in held:
            new.append((0, 0, gist))
    # Characters, by the one estimator: what the bound leaves after the previous
    # summary, and never less than a quarter of the bound.
    budget = len(previous) + max(max_tokens * 4 - len(previous), max_tokens)
    used = len(previous)
    taken: list[tuple[int, str]] = []
    for _level, position, line in sorted(new, key=lambda item: (-item[0], item[1])):
        cost = len(line) + (1 if used else 0)
        if used + cost <= budget:
            used += cost
            taken.append((position, line))
    lines = [line for _position, line in sorted(taken)]
    return " ".join([previous, *lines] if previous else lines)


def _gist(episodes: list[DialogueTurn]) -> str:
    """What the first episode with any text was about: its user's first sentence
    (else the assistant's)."""
    for turn in episodes:
        for speaker, text in (("User", turn.user), ("Assistant", turn.assistant)):
            first = next(iter(sentences(text)), "")
            if first:
                verb = "asked" if first.endswith("?") else "said"
                return f"{speaker} {verb}: {first}"
    return ""
