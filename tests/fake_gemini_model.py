"""A model for the fake endpoints (`tests.fake_gemini`, `tests.fake_openai`) that
answers every memory task from the request alone, as the `offline` provider
would: the
request's prompt is read back into the task's input (the turns of a window, the
candidates and memories to weigh, the turns to summarise), the `offline` code
decides, and the answer goes back as the JSON the prompt asks for (its last line
names the answer's field). Its usage is counted as the endpoint counts it: every
token of the system instruction and the messages in, every token of the reply
out. Install it as the fake's default for generation:

    fake.defaults["generateContent"] = offline_model  # FakeGemini
    fake.defaults["chat"] = offline_chat  # FakeOpenAI
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from shared.entities.names import mentions
from shared.llm.base import Candidate, ExistingMemory, ExtractionInput, ExtractionTurn
from shared.llm.offline.consolidation import decide
from shared.llm.offline.decomposition import decompose_query
from shared.llm.offline.extraction import extract_window
from shared.llm.offline.profile import fill_profile
from shared.profiles.schema import ProfileField
from shared.tokens import estimate_tokens
from tests import fake_openai
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
_FIELD = re.compile(
    r"^- (?P<name>[a-z][a-z0-9_]*) \((?:(?P<type>string|number|boolean)|enum: (?P<values>.*?))\)"
    r"(?:: (?P<about>.*))?$",
    re.MULTILINE,
)
_LINE = re.compile(r"^(?:Session|Previous session): (.*)$", re.MULTILINE)
# A known entity as the extraction prompt lists it: `e2 Dana Lee (person)`.
_LISTED = re.compile(r"\b(?P<label>e\d+) (?P<name>[^(,\n]+?) \(")
# A name of the turns → what the model says of it: the name of the listed entity it
# is ("Dana Lee"), any other `same_as` ("e9", an id), or "distinct".
Judged = dict[str, str]


_ANSWER = re.compile(r'Answer with JSON: \{"(?P<field>\w+)"')


def rules_value(prompt: str, judged: Judged | None = None) -> Any:
    """The answer to the task `prompt` asks for, as the `offline` provider decides it
    (its extraction's entities judged as `judged` says); None for a prompt of no
    task (the workers' probe)."""
    found = _ANSWER.search(prompt)
    field = found["field"] if found else ""
    if field == "memories":
        return {"memories": _judge(_extract(prompt), prompt, judged or {})}
    if field == "profile":
        return {"profile": _profile(prompt)}
    if field == "decisions":
        return {"decisions": _consolidate(prompt)}
    if field == "summary":
        return {"summary": _summarize(prompt)}
    if field == "additions":
        return {"additions": ""}
    if field == "queries":
        query = prompt.split("\n", 1)[0].removeprefix("Query: ")
        return {"queries": decompose_query(query, "", "")}
    return None


def offline_model(request: Request, judged: Judged | None = None) -> Reply:
    """A structured reply of the fake Gemini for whichever task the request's prompt
    (its first message) is."""
    messages = request.messages()
    value = rules_value(messages[0][1] if messages else "", judged)
    if value is None:
        return text_reply("pong")  # the workers' probe
    return counted(request, json.dumps(value))


def offline_chat(request: fake_openai.Request, judged: Judged | None = None) -> Reply:
    """`offline_model` for the fake OpenAI-compatible endpoint."""
    value = rules_value(request.prompt_text(), judged)
    if value is None:
        return fake_openai.text_reply("pong")  # the workers' probe
    return fake_openai.json_reply(value)


def counted(request: Request, text: str) -> Reply:
    """A reply of `text` with the usage Gemini would report for `request`."""
    prompt_tokens = estimate_tokens(system_text(request) + request.prompt_text())
    return Reply(body=generate_body([{"text": text}], prompt_tokens, estimate_tokens(text)))


def _turns(prompt: str) -> tuple[ExtractionTurn, ...]:
    return tuple(
        ExtractionTurn(
            m["label"],
            m["project"] or "",
            datetime.fromisoformat(m["at"]),
            m["user"],
            m["assistant"],
        )
        for m in _TURN.finditer(prompt)
    )


def _profile(prompt: str) -> list[dict[str, str]]:
    fields = tuple(
        ProfileField(
            m["name"],
            m["type"] or "enum",
            m["about"] or "",
            tuple(m["values"].split(", ")) if m["values"] else (),
        )
        for m in _FIELD.finditer(prompt.split("\n\nTurns, oldest first:", 1)[0])
    )
    inp = ExtractionInput("", "", _turns(prompt), profile=fields)
    return [{"turn": f.turn_id, "field": f.field, "value": f.value} for f in fill_profile(inp)]


def _extract(prompt: str) -> list[dict[str, str]]:
    session, previous = (_LINE.findall(prompt) + ["", ""])[:2]
    turns = _turns(prompt)
    inp = ExtractionInput(session, "" if previous == "(none)" else previous, turns)
    # A model names the entities of what it keeps: here, the rules' reading of its text.
    return [
        {
            "turn": f.turn_id,
            **{k: v for k, v in f.candidate.__dict__.items() if k != "entities"},
            "entities": [m.__dict__ for m in mentions(f.candidate.text)],
        }
        for f in extract_window(inp)
    ]


def _judge(memories: list[dict[str, Any]], prompt: str, judged: Judged) -> list[dict[str, Any]]:
    """`memories` with each entity `judged` names judged: "distinct", or `same_as` the
    label of the listed entity of the name it gives (what it gives, when none is)."""
    labels = {m["name"]: m["label"] for m in _LISTED.finditer(prompt)}
    for memory in memories:
        for entity in memory["entities"]:
            said = judged.get(entity["name"])
            if said == "distinct":
                entity["distinct"] = True
            elif said is not None:
                entity["same_as"] = labels.get(said, said)
    return memories


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
    """The first user line of the new turns, as the `offline` summariser notes a gist."""
    for line in prompt.split("\n"):
        if line.startswith("[") and "] User: " in line:
            return "User asked: " + line.split("] User: ", 1)[1]
    return "The user talked."
