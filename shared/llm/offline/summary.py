"""The offline provider's summaries: extractive. The previous summary's sentences
are kept, and from the new turns the sentences that state a constraint, a
decision, a preference or a goal are added (prefixed with who said them). When the
result would exceed the bound, the least important sentences go first (goals,
then preferences and decisions, then constraints), the oldest first within a
class. Compaction (`shared.llm.offline.compaction`) builds on the same classes.
"""

from __future__ import annotations

import re

from shared.llm.base import DialogueTurn
from shared.tokens import clip_to_tokens

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")

_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Importance by the words a sentence uses; the highest class that matches wins.
# Word and phrase sets, not one large regex: this runs on every sentence of every
# fold. Questions state nothing and are never kept.
_CLASSES: list[tuple[int, frozenset[str], frozenset[tuple[str, ...]]]] = [
    (  # constraints and vetoes
        3,
        _words(
            "must mustn't never always don't cannot can't forbidden require required only "
            "limit limits limited cap caps capped maximum minimum deadline budget "
            "constraint veto remember"
        ),
        frozenset(
            {
                ("do", "not"),
                ("not", "allowed"),
                ("at", "most"),
                ("at", "least"),
                ("no", "more", "than"),
            }
        ),
    ),
    (  # choices and technical decisions
        2,
        _words(
            "prefer prefers preferred favourite favorite rather decide decided decision "
            "chose choose chosen picked agreed backend frontend database stack framework "
            "architecture standardise standardize standardised standardized standardising "
            "standardizing"
        ),
        frozenset(
            {(who, verb) for who in ("i", "we") for verb in ("like", "love", "hate", "dislike")}
            | {(who, "really", verb) for who in ("i", "we") for verb in ("like", "love")}
            | {
                ("go", "with"),
                ("going", "with"),
                ("switch", "to"),
                ("switched", "to"),
                ("settled", "on"),
            }
            | {(who, "use") for who in ("will", "we'll", "i'll", "let's")}
        ),
    ),
    (  # ongoing goals
        1,
        _words(
            "goal aim plan planning building todo launch migrate migrates migrated "
            "migrating migration migrations"
        ),
        frozenset(
            {
                ("trying", "to"),
                ("need", "to"),
                ("needs", "to"),
                ("want", "to"),
                ("wants", "to"),
                ("working", "on"),
                ("next", "step"),
                ("to", "do"),
            }
        ),
    ),
]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


# One pass over a sentence's words: each word's class, and the phrases that start
# with it (higher classes overwrite lower ones).
_WORD_LEVEL: dict[str, int] = {}
_PHRASES_BY_FIRST: dict[str, list[tuple[list[str], int]]] = {}
for _level, _keywords, _phrases in sorted(_CLASSES, key=lambda c: c[0]):
    _WORD_LEVEL.update(dict.fromkeys(_keywords, _level))
    for _phrase in _phrases:
        _PHRASES_BY_FIRST.setdefault(_phrase[0], []).append((list(_phrase), _level))


def importance(sentence: str) -> int:
    if sentence.endswith("?"):
        return 0
    words = _WORD.findall(sentence.lower())
    best = 0
    for i, word in enumerate(words):
        level = _WORD_LEVEL.get(word, 0)
        for phrase, phrase_level in _PHRASES_BY_FIRST.get(word, ()):
            if phrase_level > level and words[i : i + len(phrase)] == phrase:
                level = phrase_level
        if level > best:
            best = level
            if best == 3:
                break
    return best


def normalised(text: str) -> str:
    return " ".join(text.casefold().split())


def new_lines(held: str, turns: list[DialogueTurn]) -> list[tuple[int, str]]:
    """The sentences of `turns` worth keeping, as (importance, "Speaker: sentence"),
    in the order said; a line `held` (normalised text) already holds is skipped
    (checked on the normalised text: no need to split `held` into sentences)."""
    new: list[tuple[int, str]] = []
    for turn in turns:
        for speaker, text in (("User", turn.user), ("Assistant", turn.assistant)):
            for sentence in sentences(text):
                level = importance(sentence)
                line = f"{speaker}: {sentence}"
                if level and normalised(line) not in held:
                    held += " " + normalised(line)
                    new.append((level, line))
    return new


def summarize(previous: str, turns: list[DialogueTurn], max_tokens: int) -> str:
    """The previous summary with what `turns` state worth keeping, within the bound."""
    held = normalised(previous)
    new = new_lines(held, turns)
    if not new:
        # Nothing stated a choice or a goal: note what was discussed.
        gist = next((s for t in turns for s in sentences(t.user)), "")
        if gist and normalised(f"User asked: {gist}") not in held:
            new.append((0, f"User asked: {gist}"))
    return _fit(previous, new, max_tokens)


def _fit(previous: str, new: list[tuple[int, str]], max_tokens: int) -> str:
    """The previous summary and the new lines within the bound. Only when over it
    are the previous summary's sentences split and classed (at least 1, so an
    earlier fallback gist is not the first thing to go)."""
    budget = max_tokens * 4  # characters, by the one estimator
    text = " ".join(
        [previous, *(line for _level, line in new)] if previous else [line for _level, line in new]
    )
    if len(text) <= budget:
        return text
    kept = [(max(1, importance(s)), s) for s in sentences(previous)] + new
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
