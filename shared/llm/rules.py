"""`rules`: a deterministic, offline provider. Real code, not a stand-in: the whole
pipeline runs with it when no model is configured, and its output depends only
on its input.

Summaries are extractive: the previous summary's sentences are kept, and from
the new turns the sentences that state a constraint, a decision, a preference or
a goal are added (prefixed with who said them). When the result would exceed the
bound, the least important sentences go first (goals, then preferences and
decisions, then constraints), the oldest first within a class.
"""

from __future__ import annotations

import re

from shared.llm.base import Completion, DialogueTurn, Usage, render_turns
from shared.tokens import clip_to_tokens, estimate_tokens

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")

# Importance by the words a sentence uses; the highest class that matches wins.
# Questions state nothing and are never kept.
_CLASSES: list[tuple[int, re.Pattern[str]]] = [
    (
        3,  # constraints and vetoes
        re.compile(
            r"\b(must|mustn't|never|always|do not|don't|cannot|can't|not allowed|"
            r"forbidden|required?|only|limits?|limited|caps?|capped|at most|at least|"
            r"no more than|maximum|minimum|deadline|budget|constraint|veto|remember)\b",
            re.IGNORECASE,
        ),
    ),
    (
        2,  # choices and technical decisions
        re.compile(
            r"\b(prefer|prefers|preferred|(i|we) (really )?(like|love|hate|dislike)|"
            r"favou?rite|rather|decided?|decision|chose|choose|chosen|picked|go with|"
            r"going with|switch(ed)? to|settled on|agreed|standardi[sz]\w*|"
            r"(will|we'll|i'll|let's) use|backend|frontend|database|stack|framework|"
            r"architecture)\b",
            re.IGNORECASE,
        ),
    ),
    (
        1,  # ongoing goals
        re.compile(
            r"\b(goal|aim|plan|planning|trying to|need to|needs to|want to|wants to|"
            r"working on|building|migrat\w*|next step|todo|to do|launch)\b",
            re.IGNORECASE,
        ),
    ),
]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def importance(sentence: str) -> int:
    if sentence.endswith("?"):
        return 0
    for level, pattern in _CLASSES:
        if pattern.search(sentence):
            return level
    return 0


def _key(sentence: str) -> str:
    return " ".join(sentence.casefold().split())


class RulesLLM:
    name = "rules"

    def summarize(
        self, previous: str, turns: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        # (importance, sentence); previous sentences keep their own importance but at
        # least 1, so an earlier fallback gist is not the first thing dropped.
        kept: list[tuple[int, str]] = [(max(1, importance(s)), s) for s in sentences(previous)]
        seen = {_key(s) for _level, s in kept}
        added = 0
        for turn in turns:
            for speaker, text in (("User", turn.user), ("Assistant", turn.assistant)):
                for sentence in sentences(text):
                    level = importance(sentence)
                    line = f"{speaker}: {sentence}"
                    if level and _key(line) not in seen:
                        seen.add(_key(line))
                        kept.append((level, line))
                        added += 1
        if not added:
            # Nothing stated a choice or a goal: note what was discussed.
            gist = next((s for t in turns for s in sentences(t.user)), "")
            if gist and _key(f"User asked: {gist}") not in seen:
                kept.append((0, f"User asked: {gist}"))
        summary = _fit(kept, max_tokens)
        usage = Usage(
            input_tokens=estimate_tokens(previous) + estimate_tokens(render_turns(turns)),
            output_tokens=estimate_tokens(summary),
        )
        return Completion(summary, usage)


def _fit(kept: list[tuple[int, str]], max_tokens: int) -> str:
    budget = max_tokens * 4  # characters, by the one estimator
    size = sum(len(s) + 1 for _level, s in kept) - 1
    dropped: set[int] = set()
    for level in range(4):
        for index, (sentence_level, sentence) in enumerate(kept):
            if size <= budget:
                break
            if sentence_level == level:
                dropped.add(index)
                size -= len(sentence) + 1
    text = " ".join(s for i, (_level, s) in enumerate(kept) if i not in dropped)
    return clip_to_tokens(text, max_tokens)
