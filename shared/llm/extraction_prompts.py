"""What the model providers (`gemini`, `openai`) ask for the write path's two tasks,
and how they read the answers: extraction of a window of turns in one call, and consolidation of
all of a window's candidates in one call.

Instructions after Vertex AI Memory Bank's: what is worth remembering, temporal
references made explicit with the session IDs filled in, scope and kind defined,
only the dialogue's text, self-contained third-person sentences. Turns, memories
and candidates go by short labels (`t1`, `m1`, `c1`) rather than their ids: a
UUID costs a dozen tokens each time it is written, in the prompt and in the
reply. Each task has a response schema (JSON mode) and a strict parser: a reply
that does not fit (an unknown label, kind, scope or action, a missing field, a
target that is not one of the candidate's memories) raises `MalformedReply`
with its fault, which `shared.llm.asking` asks the model again about.
"""

from __future__ import annotations

from typing import Any

from shared.llm import entity_prompts, replies, topics
from shared.llm.base import (
    ACTIONS,
    KINDS,
    SCOPES,
    Action,
    Candidate,
    Decision,
    ExtractionInput,
    Fault,
    Found,
    MalformedReply,
    Weighing,
)


def temporal_rules(session_id: str, prev_session_id: str) -> str:
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


def turn_labels(inp: ExtractionInput) -> list[str]:
    return [f"t{n}" for n in range(1, len(inp.turns) + 1)]


def extraction_schema(inp: ExtractionInput) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "memories": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "turn": {"type": "string", "enum": turn_labels(inp)},
                        "entity_name": {"type": "string"},
                        "kind": {"type": "string", "enum": list(KINDS)},
                        "scope": {"type": "string", "enum": list(SCOPES)},
                        "project_id": {"type": "string"},
                        "text": {"type": "string"},
                        "topic": {"type": "string", "enum": list(inp.topics.names)},
                        "entities": {
                            "type": "array",
                            "items": entity_prompts.item_schema(inp.entities),
                        },
                    },
                    "required": [
                        "turn",
                        "entity_name",
                        "kind",
                        "scope",
                        "project_id",
                        "text",
                        "topic",
                    ],
                },
            }
        },
        "required": ["memories"],
    }


def extraction_instruction(inp: ExtractionInput) -> str:
    return "\n".join(
        [
            "Extract long-term memories about a user from turns of their conversation with "
            "an AI assistant, as a memory bank does.",
            *topics.instruction(inp.topics),
            "Skip: greetings, chatter, questions, general knowledge, the assistant's "
            "explanations, hypotheticals. Turns with nothing to keep give an empty list.",
            "Use only the user's and the assistant's text; ignore tool calls and tool outputs. "
            "The assistant's words count only where they restate what the user decided.",
            "Each memory:",
            '- turn: the label of the turn that states it ("t1"); when turns change the same '
            "thing, only its latest value, with the latest turn;",
            '- text: one self-contained third-person sentence ("User prefers Dark Mode UI.", '
            '"For project CloudRetail, the region is us-east1.");',
            '- entity_name: a short lowercase key of what it is about ("ui theme", "backend"), '
            "the same whenever the same thing is meant, so a later change replaces it;",
            entity_prompts.instruction(inp.entities),
            '- kind: "preference" (a liking or choice), "fact", "rule" (a constraint or veto '
            'to follow always) or "event" (something that happened);',
            '- scope: "global" (across all the user\'s projects), "project" (one project: '
            "project_id is its name; a turn's own project unless the user says \"across all "
            'my projects"; a turn of no project only for a project the user names) or '
            '"session" (state of this session only); project_id "" unless "project".',
            temporal_rules(inp.session_id, inp.prev_session_id),
            'A revocation ("I no longer ...", "forget that ...") is itself the memory ("User '
            'no longer prefers Dark Mode UI.").',
        ]
    )


def extraction_prompt(inp: ExtractionInput) -> str:
    lines = [
        f"Session: {inp.session_id}",
        f"Previous session: {inp.prev_session_id or '(none)'}",
        "",
        *entity_prompts.listing_lines(inp.entities),
        *turn_lines(inp),
    ]
    lines.append(
        'Answer with JSON: {"memories": [{"turn": ..., "entity_name": ..., "kind": ..., '
        '"scope": ..., "project_id": ..., "text": ..., "topic": ...}, ...]}.'
    )
    return "\n".join(lines)


def turn_lines(inp: ExtractionInput) -> list[str]:
    """The window's turns as a prompt shows them, each by its label."""
    lines = ["Turns, oldest first:"]
    for label, turn in zip(turn_labels(inp), inp.turns, strict=True):
        project = f"project {turn.project_id}" if turn.project_id else "no project"
        lines += [
            f"[{label}] {turn.observed_at.isoformat(timespec='seconds')}, {project}",
            f"User: {turn.user}",
            f"Assistant: {turn.assistant}",
            "",
        ]
    return lines


def parse_found(value: Any, inp: ExtractionInput, ignored: list[str] | None = None) -> list[Found]:
    """The memories of an extraction answer; each entity judgement it gives that
    names no listed entity is left out and described in `ignored`."""
    ignored = [] if ignored is None else ignored
    memories = replies.field(value, "memories", list, "the reply")
    turns = dict(zip(turn_labels(inp), inp.turns, strict=True))
    found = []
    for index, item in enumerate(memories):
        where = f"memories[{index}]"
        if not isinstance(item, dict):
            raise MalformedReply(f"{where} is not an object")
        turn = turns[replies.choice(item, "turn", tuple(turns), where, Fault.UNKNOWN_ID)]
        entity = replies.text(item, "entity_name", where)
        kind = replies.choice(item, "kind", KINDS, where)
        scope = replies.choice(item, "scope", SCOPES, where)
        project = replies.field(item, "project_id", str, where).strip()
        text = replies.text(item, "text", where)
        # Not checked here: a memory of a topic the app does not keep is dropped later.
        topic = replies.field(item, "topic", str, where).strip()
        named, judged = entity_prompts.parse_entities(
            item.get("entities", []), where, inp.entities, ignored
        )
        # A project memory belongs to its turn's project unless the model named one.
        project = (project or turn.project_id) if scope == "project" else ""
        entity = " ".join(entity.lower().split())
        candidate = Candidate(entity, kind, scope, project, text, topic, named, judged)
        found.append(Found(turn.turn_id, candidate))
    return found


CONSOLIDATION_INSTRUCTION = "\n".join(
    [
        "You keep a user's long-term memories consistent. Each new candidate comes with the "
        "existing memories it may change (the most similar of the same user and scope). For "
        "each candidate, in order, choose:",
        '- "CREATED": new information. target: null; text: the memory to store (the '
        "candidate's text, or a clearer self-contained one).",
        '- "UPDATED": it changes or refines one of its memories. target: that label; text: '
        "the merged memory, the candidate (newer) winning where they conflict.",
        '- "DELETED": it revokes one of its memories without a new value (with one: '
        '"UPDATED"). target: that label; text: "".',
        '- "NONE": its memories already say it, or it revokes nothing held. target: the '
        'duplicate\'s label or null; text: "".',
        "A target is one of the candidate's labels or null. Candidates come in the order "
        "said and are applied in that order: a later one about the same thing wins, and "
        "when two change the same memory, the later one's text keeps what the earlier one "
        "added. Texts are third-person sentences.",
    ]
)


def _memory_labels(weighings: list[Weighing]) -> dict[str, str]:
    """Each existing memory's id -> its label, `m1`... in order of first mention."""
    labels: dict[str, str] = {}
    for weighing in weighings:
        for memory in weighing.existing:
            labels.setdefault(memory.id, f"m{len(labels) + 1}")
    return labels


def consolidation_schema(weighings: list[Weighing]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "decisions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "candidate": {
                            "type": "string",
                            "enum": [f"c{n}" for n in range(1, len(weighings) + 1)],
                        },
                        "action": {"type": "string", "enum": list(ACTIONS)},
                        "target": {"type": ["string", "null"]},
                        "text": {"type": "string"},
                    },
                    "required": ["candidate", "action", "target", "text"],
                },
            }
        },
        "required": ["decisions"],
    }


def consolidation_prompt(weighings: list[Weighing]) -> str:
    labels = _memory_labels(weighings)
    lines = ["Existing memories:"]
    listed: set[str] = set()
    for weighing in weighings:
        for m in weighing.existing:
            if m.id not in listed:
                listed.add(m.id)
                lines.append(
                    f"- {labels[m.id]}: entity: {m.entity_name}; kind: {m.kind}; "
                    f"scope: {m.scope}; text: {m.text}"
                )
    if not listed:
        lines.append("(none)")
    lines += ["", "Candidates, in the order said:"]
    for n, weighing in enumerate(weighings, start=1):
        c = weighing.candidate
        project = f"; project: {c.project_id}" if c.project_id else ""
        may = ", ".join(labels[m.id] for m in weighing.existing) or "nothing"
        lines.append(
            f"- c{n}: entity: {c.entity_name}; kind: {c.kind}; scope: {c.scope}{project}; "
            f"text: {c.text}; may change: {may}"
        )
    lines += [
        "",
        'Answer with JSON: {"decisions": [{"candidate": ..., "action": ..., "target": ..., '
        '"text": ...}, ...]}, one per candidate, in order.',
    ]
    return "\n".join(lines)


def parse_decisions(value: Any, weighings: list[Weighing]) -> list[Decision]:
    items = replies.field(value, "decisions", list, "the reply")
    labels = _memory_labels(weighings)
    by_candidate: dict[int, Decision] = {}
    for index, item in enumerate(items):
        where = f"decisions[{index}]"
        labels_of_candidates = tuple(f"c{n}" for n in range(1, len(weighings) + 1))
        number = replies.choice(item, "candidate", labels_of_candidates, where, Fault.UNKNOWN_ID)
        n = int(number[1:]) - 1
        if n in by_candidate:
            raise MalformedReply(f"{where}: a second decision for {number}")
        allowed = {labels[m.id]: m.id for m in weighings[n].existing}
        by_candidate[n] = _decision(item, allowed, where)
    if len(by_candidate) != len(weighings):
        missing = [f"c{n + 1}" for n in range(len(weighings)) if n not in by_candidate]
        raise MalformedReply(f"no decision for {', '.join(missing)}")
    return [by_candidate[n] for n in range(len(weighings))]


def _decision(item: dict[str, Any], allowed: dict[str, str], where: str) -> Decision:
    action = Action(replies.choice(item, "action", ACTIONS, where))
    if "target" not in item:
        raise MalformedReply(f"{where} has no 'target'")
    target = item["target"] or None
    if target is not None and not isinstance(target, str):
        raise MalformedReply(f"{where}: 'target' is neither a string nor null")
    if target is not None and target not in allowed:
        # An invented id, or another candidate's memory: it must never touch a memory.
        raise MalformedReply(
            f"{where}: 'target' {target!r} is not one the candidate may change", Fault.UNKNOWN_ID
        )
    target_id = allowed[target] if target is not None else None
    text = replies.field(item, "text", str, where).strip()
    if action == Action.CREATED:
        if target_id is not None:
            raise MalformedReply(f"{where}: CREATED with a target")
        if not text:
            raise MalformedReply(f"{where}: CREATED with no text")
        return Decision(action, None, text)
    if action in (Action.UPDATED, Action.DELETED) and target_id is None:
        raise MalformedReply(f"{where}: {action} with no target")
    if action == Action.UPDATED:
        if not text:
            raise MalformedReply(f"{where}: UPDATED with no text")
        return Decision(action, target_id, text)
    return Decision(action, target_id, "")
