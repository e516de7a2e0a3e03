"""What the `gemini` provider asks for the memory tasks and for compaction, and how
it reads the answer.

Instructions after Vertex AI Memory Bank's: what is worth remembering, temporal
references made explicit with the session IDs filled in, scope and kind defined,
only the dialogue's text, self-contained third-person sentences. Each task has a
response schema (JSON mode) and a strict parser: a reply that does not fit (an
unknown kind or scope, a missing field, a wrong type, a target that is not one of
the memories shown) raises `MalformedReply`, which `GeminiLLM.generate_json`
retries.
"""

from __future__ import annotations

from typing import Any

from shared.llm.base import (
    ACTIONS,
    KINDS,
    SCOPES,
    SUMMARY_INSTRUCTION,
    Action,
    Candidate,
    Decision,
    DialogueTurn,
    ExistingMemory,
    ExtractionInput,
    MalformedReply,
    render_turns,
)
from shared.tokens import clip_to_tokens, estimate_tokens

MAX_SUB_QUERIES = 4

_MEMORY_FIELDS = ("entity_name", "kind", "scope", "project_id", "text")

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "entity_name": {"type": "string"},
                    "kind": {"type": "string", "enum": list(KINDS)},
                    "scope": {"type": "string", "enum": list(SCOPES)},
                    "project_id": {"type": "string"},
                    "text": {"type": "string"},
                },
                "required": list(_MEMORY_FIELDS),
            },
        }
    },
    "required": ["memories"],
}

CONSOLIDATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "target_id": {"type": ["string", "null"]},
        "text": {"type": "string"},
    },
    "required": ["action", "target_id", "text"],
}

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


def _temporal_rules(session_id: str, prev_session_id: str) -> str:
    previous = (
        f'"in session {prev_session_id}"'
        if prev_session_id
        else "unknown (leave such references as they are)"
    )
    return (
        "Temporal references: write explicit session IDs instead of relative ones. "
        f'"now", "currently", "today", "this session" → "in session {session_id}"; '
        f'"last session", "previous session" → {previous}.'
    )


def extraction_instruction(inp: ExtractionInput) -> str:
    if inp.project_id:
        turn_project = (
            f'This turn belongs to project "{inp.project_id}": what the user states about '
            f'their work here is "project" scope with project_id "{inp.project_id}", unless '
            "they say it holds across all their projects."
        )
    else:
        turn_project = (
            'This turn belongs to no project: use "project" only for a project the user '
            "names, with its name as project_id."
        )
    return "\n".join(
        [
            "You extract long-term memories about a user from one turn of their "
            "conversation with an AI assistant, as a memory bank does.",
            "",
            "Worth remembering:",
            "- the user's preferences (tools, languages, styles, interfaces, ways of working);",
            "- facts about the user and their projects (architecture, stack, infrastructure, "
            "people, deadlines);",
            "- anything the user explicitly asks to remember;",
            '- constraints and vetoes ("must", "never", "always", limits, what is not allowed);',
            "- key outcomes and decisions of the conversation.",
            "Not worth remembering: greetings, chatter, questions, general knowledge, the "
            "assistant's explanations, anything hypothetical. A turn may hold nothing worth "
            "remembering: then answer with an empty list.",
            "",
            "Use only the user's and the assistant's text; ignore tool calls and tool outputs. "
            "What the assistant says counts only when it restates what the user decided.",
            "",
            "Each memory:",
            '- text: one self-contained sentence in the third person ("User prefers Dark Mode '
            'UI.", "For project CloudRetail, the region is us-east1."), clear without the '
            "conversation;",
            '- entity_name: a short lowercase key of what it is about ("ui theme", '
            '"backend", "tool execution timeout"), the same key whenever the same thing is '
            "meant again, so a later change of it can replace it;",
            '- kind: "preference" (a liking or choice), "fact" (something true about the user '
            'or a project), "rule" (a constraint or veto to follow always), "event" (something '
            "that happened, an outcome);",
            '- scope: "global" (holds across all the user\'s projects), "project" (about one '
            'project), "session" (task state of this session only: "in this session", "for '
            'this session");',
            '- project_id: the project for scope "project", otherwise "".',
            turn_project,
            "",
            _temporal_rules(inp.session_id, inp.prev_session_id),
            'When the user revokes something ("I no longer ...", "forget that ..."), write the '
            'revocation as the memory ("User no longer prefers Dark Mode UI.").',
        ]
    )


def extraction_prompt(inp: ExtractionInput) -> str:
    return (
        f"Session: {inp.session_id}\n"
        f"Previous session: {inp.prev_session_id or '(none)'}\n"
        f"Project: {inp.project_id or '(none)'}\n"
        f"Observed at: {inp.observed_at.isoformat(timespec='seconds')}\n\n"
        f"User: {inp.user}\n"
        f"Assistant: {inp.assistant}\n\n"
        'Answer with JSON: {"memories": [{"entity_name": ..., "kind": ..., "scope": ..., '
        '"project_id": ..., "text": ...}, ...]}.'
    )


def parse_candidates(value: Any, inp: ExtractionInput) -> list[Candidate]:
    memories = _field(value, "memories", list, "the reply")
    candidates = []
    for index, item in enumerate(memories):
        where = f"memories[{index}]"
        if not isinstance(item, dict):
            raise MalformedReply(f"{where} is not an object")
        entity = _text(item, "entity_name", where)
        kind = _choice(item, "kind", KINDS, where)
        scope = _choice(item, "scope", SCOPES, where)
        project = _field(item, "project_id", str, where).strip()
        text = _text(item, "text", where)
        # A project memory belongs to the turn's project unless the model named one.
        project = (project or inp.project_id) if scope == "project" else ""
        candidates.append(Candidate(" ".join(entity.lower().split()), kind, scope, project, text))
    return candidates


CONSOLIDATION_INSTRUCTION = "\n".join(
    [
        "You keep a user's long-term memories consistent. Compare one new candidate memory "
        "with the user's most similar existing memories (same user and scope) and choose one "
        "action:",
        '- "CREATED": the candidate is new information. target_id: null; text: the memory '
        "to store (the candidate's text, or a clearer self-contained version of it).",
        '- "UPDATED": the candidate is about the same thing as an existing memory and '
        "changes or refines it. target_id: that memory's id; text: the merged memory, where "
        "the candidate (the newer statement) wins wherever they conflict.",
        '- "DELETED": the candidate revokes or contradicts an existing memory without stating '
        'a new value. target_id: that memory\'s id; text: "". If the candidate also states a '
        'new value, choose "UPDATED" instead.',
        '- "NONE": the existing memories already say what the candidate says (a duplicate), '
        "or the candidate revokes something no memory holds. target_id: the duplicated "
        'memory\'s id, or null; text: "".',
        "target_id is one of the ids listed, or null. Texts are self-contained sentences in "
        "the third person.",
    ]
)


def consolidation_prompt(candidate: Candidate, existing: list[ExistingMemory]) -> str:
    lines = [
        "Candidate memory:",
        f"  entity: {candidate.entity_name}; kind: {candidate.kind}; scope: {candidate.scope}"
        + (f"; project: {candidate.project_id}" if candidate.project_id else ""),
        f"  text: {candidate.text}",
        "",
        "Existing memories:",
    ]
    for memory in existing:
        lines.append(
            f"- id: {memory.id}; entity: {memory.entity_name}; kind: {memory.kind}; "
            f"scope: {memory.scope}; text: {memory.text}"
        )
    if not existing:
        lines.append("(none)")
    lines += ["", 'Answer with JSON: {"action": ..., "target_id": ..., "text": ...}.']
    return "\n".join(lines)


def parse_decision(value: Any, existing: list[ExistingMemory]) -> Decision:
    action = Action(_choice(value, "action", ACTIONS, "the reply"))
    if "target_id" not in value:
        raise MalformedReply("the reply has no 'target_id'")
    target = value["target_id"]
    if target == "":
        target = None
    if target is not None and not isinstance(target, str):
        raise MalformedReply("'target_id' is neither a string nor null")
    text = _field(value, "text", str, "the reply").strip()
    ids = {m.id for m in existing}
    if target is not None and target not in ids:
        raise MalformedReply(f"'target_id' {target!r} is not one of the memories given")
    if action == Action.CREATED:
        if target is not None:
            raise MalformedReply("CREATED with a target_id")
        if not text:
            raise MalformedReply("CREATED with no text")
        return Decision(action, None, text)
    if action in (Action.UPDATED, Action.DELETED) and target is None:
        raise MalformedReply(f"{action} with no target_id")
    if action == Action.UPDATED:
        if not text:
            raise MalformedReply("UPDATED with no text")
        return Decision(action, target, text)
    return Decision(action, target, "")


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
        "query about one thing stays one sub-query. " + _temporal_rules(session_id, prev_session_id)
    )


def decomposition_prompt(query: str) -> str:
    return f'Query: {query}\n\nAnswer with JSON: {{"queries": [...]}}.'


def parse_queries(value: Any) -> list[str]:
    queries = _field(value, "queries", list, "the reply")
    if not 1 <= len(queries) <= MAX_SUB_QUERIES:
        raise MalformedReply(f"{len(queries)} queries, not 1 to {MAX_SUB_QUERIES}")
    if not all(isinstance(q, str) and q.strip() for q in queries):
        raise MalformedReply("a query that is not a non-empty string")
    return [" ".join(q.split()) for q in queries]


# -- strict reading -------------------------------------------------------------
def _field(value: Any, name: str, kind: type, where: str) -> Any:
    if not isinstance(value, dict):
        raise MalformedReply(f"{where} is not an object")
    if name not in value:
        raise MalformedReply(f"{where} has no {name!r}")
    field = value[name]
    if not isinstance(field, kind):
        raise MalformedReply(f"{where}: {name!r} is not a {kind.__name__}")
    return field


def _text(value: dict[str, Any], name: str, where: str) -> str:
    text = _field(value, name, str, where).strip()
    if not text:
        raise MalformedReply(f"{where}: {name!r} is empty")
    return text


def _choice(value: Any, name: str, allowed: tuple[str, ...], where: str) -> str:
    choice = _field(value, name, str, where)
    if choice not in allowed:
        raise MalformedReply(f"{where}: {name!r} is {choice!r}, not one of {', '.join(allowed)}")
    return choice
