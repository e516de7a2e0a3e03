"""A model for the fake Gemini endpoint (`tests.fake_gemini`) that answers every
memory task from the request alone, as the offline `rules` provider would: the
request's prompt is read back into the task's input (the turns of a window, the
candidates and memories to weigh, the turns to summarise), the `rules` code
decides, and the answer goes back as the JSON the response schema asks for. Its
usage is counted as Gemini counts it: every token of the system instruction and
the contents in, every token of the reply out. Install it as the fake's
`generateContent` default:

    fake.defaults["generateContent"] = rules_model
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from shared.llm.base import Candidate, ExistingMemory, ExtractionInput, ExtractionTurn
from shared.llm.consolidation_rules import decide
from shared.llm.decomposition_rules import decompose_query
from shared.llm.extraction_rules import extract_window
from shared.tokens import estimate_tokens
from tests.fake_gemini import Reply, Request, generate_body, text_reply
from tests.fake_gemini_agent import system_text

_TURN = re.compile(
    r"^\[(?P<label>t\d+)\] (?P<at>\S+), (?:project (?P<project>[^\n]+)|no project)\n"
    r"User: (?P<user>.*?)\nAssistant: (?P<assistant>.*?)(?=\n\n\[t\d+\] |\n\nAnswer with JSON)",
    re.MULTILINE | re.DOTALL,
)
_MEMORY = re.compile(
    r"^- (?P<label>m\d+): entity: (?P<entity>.*?); kind: (?P<kind>\w+); "
    r"scope: (?P<scope>\w+); text: (?P<text>.*)$",
    re.MULTILINE,
)
_CANDIDATE = re.compile(
    r"^- (?P<label>c\d+): entity: (?P<entity>.*?); kind: (?P<kind>\w+); scope: (?P<scope>\w+)"
    r"(?:; project: (?P<project>.*?))?; text: (?P<text>.*?); may change: (?P<may>.*)$",
    re.MULTILINE,
)
_LINE = re.compile(r"^(?:Session|Previous session): (.*)$", re.MULTILINE)


def rules_model(request: Request) -> Reply:
    """A structured reply for whichever task the request's response schema is."""
    schema = request.body.get("generationConfig", {}).get("responseJsonSchema") or {}
    fields = schema.get("properties", {})
    prompt = request.prompt_text()
    if "memories" in fields:
        value: Any = {"memories": _extract(prompt)}
    elif "decisions" in fields:
        value = {"decisions": _consolidate(prompt)}
    elif "summary" in fields:
        value = {"summary": _summarize(prompt)}
    elif "additions" in fields:
        value = {"additions": ""}
    elif "queries" in fields:
        query = prompt.split("\n", 1)[0].removeprefix("Query: ")
        value = {"queries": decompose_query(query, "", "")}
    else:
        return text_reply("pong")  # the workers' probe
    return counted(request, json.dumps(value))


def counted(request: Request, text: str) -> Reply:
    """A reply of `text` with the usage Gemini would report for `request`."""
    prompt_tokens = estimate_tokens(system_text(request) + request.prompt_text())
    return Reply(body=generate_body([{"text": text}], prompt_tokens, estimate_tokens(text)))


def _extract(prompt: str) -> list[dict[str, str]]:
    session, previous = (_LINE.findall(prompt) + ["", ""])[:2]
    turns = tuple(
        ExtractionTurn(
            m["label"],
            m["project"] or "",
            datetime.fromisoformat(m["at"]),
            m["user"],
            m["assistant"],
        )
        for m in _TURN.finditer(prompt)
    )
    inp = ExtractionInput(session, "" if previous == "(none)" else previous, turns)
    return [{"turn": f.turn_id, **f.candidate.__dict__} for f in extract_window(inp)]


def _consolidate(prompt: str) -> list[dict[str, Any]]:
    memories = {
        m["label"]: ExistingMemory(m["label"], m["entity"], m["kind"], m["scope"], "", m["text"])
        for m in _MEMORY.finditer(prompt)
    }
    decisions = []
    for c in _CANDIDATE.finditer(prompt):
        candidate = Candidate(c["entity"], c["kind"], c["scope"], c["project"] or "", c["text"])
        labels = [] if c["may"] == "nothing" else c["may"].split(", ")
        # The rules decide within a scope: the memories shown are the candidate's own.
        mine = [
            ExistingMemory(m.id, m.entity_name, m.kind, m.scope, candidate.project_id, m.text)
            for m in (memories[label] for label in labels)
        ]
        decision = decide(candidate, mine)
        decisions.append(
            {
                "candidate": c["label"],
                "action": decision.action.value,
                "target": decision.target_id,
                "text": decision.text,
            }
        )
    return decisions


def _summarize(prompt: str) -> str:
    """The first user line of the new turns, as the `rules` summariser notes a gist."""
    for line in prompt.split("\n"):
        if line.startswith("[") and "] User: " in line:
            return "User asked: " + line.split("] User: ", 1)[1]
    return "The user talked."
