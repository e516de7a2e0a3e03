"""What the model providers (`gemini`, `openai`) ask for the summary, compaction and
decomposition tasks, and how they read the answer (the write path's extraction and consolidation
are `shared.llm.extraction_prompts`). Each task has a response schema (JSON
mode) and a strict parser: a reply that does not fit raises `MalformedReply`,
which `shared.llm.asking` asks the model again about.
"""

from __future__ import annotations

from typing import Any

from shared.llm import replies
from shared.llm.base import SUMMARY_INSTRUCTION, DialogueTurn, MalformedReply, render_turns
from shared.llm.extraction_prompts import temporal_rules
from shared.tokens import clip_to_tokens, estimate_tokens

MAX_SUB_QUERIES = 4

DECOMPOSITION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "queries": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "maxItems": MAX_SUB_QUERIES,
        }
    },
    "required": ["queries"],
}


SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}


def parse_summary(value: Any, max_tokens: int) -> str:
    summary = value.get("summary") if isinstance(value, dict) else None
    if not isinstance(summary, str) or not summary.strip():
        raise MalformedReply("no non-empty 'summary' string")
    # The bound holds whatever the model wrote.
    return clip_to_tokens(summary.strip(), max_tokens)


def summary_instruction(max_tokens: int) -> str:
    return SUMMARY_INSTRUCTION.format(max_tokens=max_tokens)


def summary_prompt(previous: str, turns: list[DialogueTurn]) -> str:
    return (
        f"Previous summary:\n{previous or '(none)'}\n\n"
        f"New turns, oldest first:\n{render_turns(turns)}\n\n"
        'Answer with JSON: {"summary": "<the new rolling summary>"}.'
    )


COMPACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"additions": {"type": "string"}},
    "required": ["additions"],
}


def additions_bound(previous: str, max_tokens: int) -> int:
    """Tokens the episodes may add: what is left of `max_tokens` after the previous
    summary, but never less than a quarter of it (the facts of archived episodes
    must not vanish because the summary is long: it grows past the bound instead)."""
    return max(max_tokens - estimate_tokens(previous), max_tokens // 4, 1)


def compaction_instruction(previous: str, max_tokens: int) -> str:
    return "\n".join(
        [
            "You maintain the long-term summary of a user's past conversations with an AI "
            "assistant. Old conversation turns (episodes) are being archived and deleted: "
            "what you write is the only record of them that will remain.",
            "- Write only what the episodes ADD to the previous summary: the user's "
            "preferences, facts about the user and their projects, constraints and vetoes, "
            "decisions, outcomes, ongoing goals. Where an episode changes a fact of the "
            "previous summary, state the new value and when it changed. Do not repeat the "
            "previous summary (it is kept as it is); drop greetings, filler and questions "
            "that stated nothing.",
            "- Use only the user's and the assistant's text. Write plain self-contained "
            "sentences in the third person ('The user ...'), with dates where they matter.",
            f"- Stay within {additions_bound(previous, max_tokens)} tokens. If the episodes "
            "add nothing worth keeping, answer with an empty string.",
        ]
    )


def compaction_prompt(previous: str, episodes: list[DialogueTurn]) -> str:
    return (
        f"Previous summary (kept as it is):\n{previous or '(none)'}\n\n"
        f"Episodes to fold in, oldest first:\n{render_turns(episodes)}\n\n"
        'Answer with JSON: {"additions": "<what the episodes add>"}.'
    )


def parse_compaction(value: Any, previous: str, max_tokens: int) -> str:
    """The new summary: the previous one verbatim, then the model's additions (within
    their bound). The model never rewrites the previous summary, so no fact of it can
    be lost (docs/design.md, "Compaction")."""
    if not isinstance(value, dict) or not isinstance(value.get("additions"), str):
        raise MalformedReply("the reply has no string field 'additions'")
    additions = clip_to_tokens(value["additions"].strip(), additions_bound(previous, max_tokens))
    parts = [part for part in (previous.strip(), additions) if part]
    return "\n".join(parts) or NOTHING_KEPT


NOTHING_KEPT = "The archived conversation turns held nothing worth keeping."


def decomposition_instruction(session_id: str, prev_session_id: str) -> str:
    return (
        "You split a search query over a user's long-term memories into single-topic "
        f"sub-queries: 1 to {MAX_SUB_QUERIES}, each about one thing and clear on its own. A "
        "query about one thing stays one sub-query. " + temporal_rules(session_id, prev_session_id)
    )


def decomposition_prompt(query: str) -> str:
    return f'Query: {query}\n\nAnswer with JSON: {{"queries": [...]}}.'


def parse_queries(value: Any) -> list[str]:
    queries = replies.field(value, "queries", list, "the reply")
    if not 1 <= len(queries) <= MAX_SUB_QUERIES:
        raise MalformedReply(f"{len(queries)} queries, not 1 to {MAX_SUB_QUERIES}")
    if not all(isinstance(q, str) and q.strip() for q in queries):
        raise MalformedReply("a query that is not a non-empty string")
    return [" ".join(q.split()) for q in queries]
