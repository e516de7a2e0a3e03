"""`rules`: a deterministic, offline provider. Real code, not a stand-in: the whole
pipeline runs with it when no model is configured, and its output depends only
on its input.

Summaries are extractive: the previous summary's sentences are kept, and from
the new turns the sentences that state a constraint, a decision, a preference or
a goal are added (prefixed with who said them). When the result would exceed the
bound, the least important sentences go first (goals, then preferences and
decisions, then constraints), the oldest first within a class.

Compaction (`shared.llm.compaction_rules`) is extractive too, but the previous
compacted summary is never cut: every sentence of it is kept, and the episodes'
most important sentences are added within the bound.

The memory tasks, each documented in its module:
- extraction (`shared.llm.extraction_rules`, its patterns in
  `shared.llm.statement_rules`): explicit statements of the user's text only
  ("I prefer ...", "remember that ...", "... must ...", "for project X, ... is
  ...", "my ... is ...", "I've switched to ...", "I no longer ..."), with
  scope, kind, entity names from a facet lexicon (`shared.llm.facets`) and
  session references made explicit (`shared.llm.session_refs`);
- consolidation (`shared.llm.consolidation_rules`): by entity name, then by
  the fact a clause states (`shared.llm.clauses`: subject, predicate, value),
  then by word-set similarity; the newer statement wins, a revocation retires;
- decomposition (`shared.llm.decomposition_rules`): split at "?", ";" and
  "and" between questions, at most four.
Tokens are counted by the one estimator over what goes in and what comes out.
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

from shared.llm import accounting
from shared.llm import extraction_prompts as write_prompts
from shared.llm import task_prompts as prompts
from shared.llm.base import (
    Completion,
    Decision,
    DialogueTurn,
    ExtractionInput,
    Found,
    Usage,
    Weighing,
)
from shared.llm.consolidation_rules import decide
from shared.llm.decomposition_rules import decompose_query
from shared.llm.extraction_rules import extract_window
from shared.tokens import clip_to_tokens, estimate_tokens

T = TypeVar("T")

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


class RulesLLM:
    name = "rules"

    def summarize(
        self, previous: str, turns: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        held = normalised(previous)
        new = new_lines(held, turns)
        if not new:
            # Nothing stated a choice or a goal: note what was discussed.
            gist = next((s for t in turns for s in sentences(t.user)), "")
            if gist and normalised(f"User asked: {gist}") not in held:
                new.append((0, f"User asked: {gist}"))
        summary = _fit(previous, new, max_tokens)
        return _counted(
            "summarize",
            summary,
            prompts.summary_instruction(max_tokens) + prompts.summary_prompt(previous, turns),
            summary,
        )

    def compact(
        self, previous: str, episodes: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        # Imported here: `compaction_rules` builds on this module's sentence classes.
        from shared.llm.compaction_rules import compact_episodes

        summary = compact_episodes(previous, episodes, max_tokens)
        return _counted(
            "compact",
            summary,
            prompts.compaction_instruction(previous, max_tokens)
            + prompts.compaction_prompt(previous, episodes),
            summary[len(previous) :],
        )

    def extract(self, inp: ExtractionInput) -> Completion[list[Found]]:
        found = extract_window(inp)
        return _counted(
            "extract",
            found,
            write_prompts.extraction_instruction(inp) + write_prompts.extraction_prompt(inp),
            json.dumps([{"turn": f.turn_id, **f.candidate.__dict__} for f in found]),
        )

    def consolidate(self, weighings: list[Weighing]) -> Completion[list[Decision]]:
        decisions = [decide(w.candidate, list(w.existing)) for w in weighings]
        return _counted(
            "consolidate",
            decisions,
            write_prompts.CONSOLIDATION_INSTRUCTION + write_prompts.consolidation_prompt(weighings),
            json.dumps([d.__dict__ for d in decisions]),
        )

    def decompose(self, query: str, session_id: str, prev_session_id: str) -> Completion[list[str]]:
        queries = decompose_query(query, session_id, prev_session_id)
        return _counted(
            "decompose",
            queries,
            prompts.decomposition_instruction(session_id, prev_session_id)
            + prompts.decomposition_prompt(query),
            json.dumps(queries),
        )


def _counted(task: str, value: T, prompt: str, reply: str) -> Completion[T]:
    """The completion, counted as the `gemini` provider's would be: one call, the
    tokens of the prompt it sends for the same task, and of the reply. So the
    figures (calls per turn, tokens in the metrics and the demo's report) mean the
    same whichever provider answered, although this one calls no model."""
    usage = Usage(input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(reply))
    accounting.count_tokens(task, usage.input_tokens, usage.output_tokens)
    accounting.count_call(task, accounting.OK)
    return Completion(value, usage)


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
