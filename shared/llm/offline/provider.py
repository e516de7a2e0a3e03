"""`offline`: a deterministic provider that calls no model. Real code, not a stand-in: the whole
pipeline runs with it when no model is configured, and its output depends only
on its input.

Summaries are extractive (`shared.llm.offline.summary`).

Compaction (`shared.llm.offline.compaction`) is extractive too, but the previous
compacted summary is never cut: every sentence of it is kept, and the episodes'
most important sentences are added within the bound.

The memory tasks, each documented in its module:
- extraction (`shared.llm.offline.extraction`, its patterns in
  `shared.llm.offline.statements`): explicit statements of the user's text only
  ("I prefer ...", "remember that ...", "... must ...", "for project X, ... is
  ...", "my ... is ...", "I've switched to ...", "I no longer ..."), with
  scope, kind, entity names from a facet lexicon (`shared.llm.offline.facets`) and
  session references made explicit (`shared.llm.offline.session_refs`);
- consolidation (`shared.llm.offline.consolidation`): by entity name, then by
  the fact a clause states (`shared.llm.offline.clauses`: subject, predicate, value),
  then by word-set similarity; the newer statement wins, a revocation retires;
- a profile (`shared.llm.offline.profile`): "my name is ...", "call me ...", "I'm
  based in the ... timezone", "I prefer to speak ...", "I work as ...", and "my
  <field> is ..." for any field of the app's schema;
- decomposition (`shared.llm.offline.decomposition`): split at "?", ";" and
  "and" between questions, at most four.
Tokens are counted by the one estimator over what goes in and what comes out.
"""

from __future__ import annotations

import json
from typing import TypeVar

from shared.llm import accounting, profile_prompts
from shared.llm import extraction_prompts as write_prompts
from shared.llm import task_prompts as prompts
from shared.llm.base import (
    Completion,
    Decision,
    DialogueTurn,
    ExtractionInput,
    Found,
    ProfileFound,
    Usage,
    Weighing,
)
from shared.llm.offline.compaction import compact_episodes
from shared.llm.offline.consolidation import decide
from shared.llm.offline.decomposition import decompose_query
from shared.llm.offline.extraction import extract_window
from shared.llm.offline.profile import fill_profile
from shared.llm.offline.summary import summarize
from shared.tokens import estimate_tokens

T = TypeVar("T")


class OfflineLLM:
    name = "offline"
    judges_entities = False  # its rules are those of resolution already

    def summarize(
        self, previous: str, turns: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        summary = summarize(previous, turns, max_tokens)
        return _counted(
            "summarize",
            summary,
            prompts.summary_instruction(max_tokens) + prompts.summary_prompt(previous, turns),
            summary,
        )

    def compact(
        self, previous: str, episodes: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
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

    def fill_profile(self, inp: ExtractionInput) -> Completion[list[ProfileFound]]:
        found = fill_profile(inp)
        return _counted(
            "profile",
            found,
            profile_prompts.PROFILE_INSTRUCTION + profile_prompts.profile_prompt(inp),
            json.dumps([f.__dict__ for f in found]),
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
