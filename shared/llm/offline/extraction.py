"""Extraction for the `offline` provider: explicit statements only, sentence by
sentence from the USER's text. The assistant's text is not read: what it says is
either its own suggestion (not the user's choice) or a restatement of what the
user said, which the user's text already holds. Questions (a sentence ending in
"?") and sentences no statement pattern matches (greetings, requests, chatter)
give nothing.

A sentence is split into clauses at ",", ";", "and", "but" when the next piece
reads as a clause of its own (it starts with "I"/"we"/"my"/... or holds "is",
"are", "must", ...); otherwise the piece stays with the clause before it. Each
clause is matched against the patterns of `shared.llm.offline.statements`.

Scope, per sentence: "in/for this session" → session; a stated project ("for
project X, ...", "For X, ...", "in project X", "the X project") → project X;
"across all my projects", "universal", "in general", "globally", "everywhere" →
global; else the turn's project → project; else global. A project memory reads
"For project X, ...". Temporal references become session IDs
(`shared.llm.offline.session_refs`) at the end of the memory.
"""

from __future__ import annotations

import re

from shared.llm.base import Candidate, ExtractionInput, ExtractionTurn, Found
from shared.llm.offline.phrasing import capitalise, lower_first, word_set
from shared.llm.offline.session_refs import strip_session_refs
from shared.llm.offline.stated import Reading
from shared.llm.offline.statements import FROM_NOW_ON, LEAD, claims
from shared.llm.topics import topic_of

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")

_SESSION_SCOPE = re.compile(
    r"\b(?:in|for|during)\s+(?:the\s+rest\s+of\s+)?(?:this|the\s+current)\s+session\b", re.I
)
_GLOBAL_SCOPE = re.compile(
    r"\bacross\s+(?:all\s+)?(?:of\s+)?(?:my\s+|our\s+)?projects\b"
    r"|\b(?:for|in)\s+(?:all|every)\s+(?:of\s+)?(?:my\s+|our\s+)?projects?\b"
    r"|\buniversal(?:ly)?\b|\bin\s+general\b|\bglobally\b|\beverywhere\b"
    r"|\bregardless\s+of\s+(?:the\s+)?project\b",
    re.I,
)
_NAME = r"[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?"
_PROJECT_LEAD = re.compile(
    rf"^(?:for|in|on|within)\s+(?:the\s+)?(?:project\s+(?P<name>{_NAME})|(?P<named>{_NAME})"
    r"\s+project)\b\s*[,:]?\s*",
    re.I,
)
_PROJECT_ANYWHERE = re.compile(
    rf",?\s*\b(?:in|for|on|within)\s+(?:the\s+)?project\s+(?P<name>{_NAME})\b,?", re.I
)
_FOR_NAME = re.compile(rf"^[Ff]or\s+(?P<name>{_NAME})\s*,\s*")
# "For X, ..." names a project only when X is a name (capitalised), not one of these.
_NOT_PROJECTS = word_set(
    "example instance now reference context clarity the this that me us all most some "
    "simplicity safety security performance later today once my our your current same "
    "every each any"
)

_CLAUSE_SPLIT = re.compile(r"(\s*[;,]\s*(?:(?:and|but)\s+)?|\s+(?:and|but)\s+)", re.I)
_CLAUSE_START = re.compile(
    r"(?:i|we|i'm|i've|i'd|we're|we've|my|our|remember|forget|please|always|never|"
    r"from\s+now\s+on)\b",
    re.I,
)
_CLAUSE_VERB = re.compile(r"\b(?:is|are|must|should|cannot|can't|was|were)\b", re.I)


def extract_window(inp: ExtractionInput) -> list[Found]:
    """The memories each turn's user text states, turn by turn, each once per turn,
    of the topics the app keeps."""
    return [
        Found(turn.turn_id, candidate)
        for turn in inp.turns
        for candidate in extract_candidates(turn, inp)
        if inp.topics.keeps(candidate.topic)
    ]


def extract_candidates(turn: ExtractionTurn, inp: ExtractionInput) -> list[Candidate]:
    """The memories one turn's user text states, in order, each once."""
    found: list[Candidate] = []
    for sentence in _SENTENCE_END.split(turn.user):
        for candidate in _from_sentence(sentence.strip(), turn, inp):
            if candidate not in found:
                found.append(candidate)
    return found


def _from_sentence(sentence: str, turn: ExtractionTurn, inp: ExtractionInput) -> list[Candidate]:
    if not sentence or sentence.endswith("?"):
        return []
    body = sentence.rstrip(".! ")
    project, body = _stated_project(body)
    if _SESSION_SCOPE.search(body):
        scope, project_id = "session", ""
    elif project:
        scope, project_id = "project", project
    elif _GLOBAL_SCOPE.search(body):
        scope, project_id = "global", ""
    elif turn.project_id:
        scope, project_id = "project", turn.project_id
    else:
        scope, project_id = "global", ""
    from_now_on = FROM_NOW_ON.search(body) is not None
    context = Reading(bool(project), from_now_on, in_project=bool(project or turn.project_id))
    candidates = []
    for clause in clauses(body):
        for claim in claims(clause, context):
            text, session = strip_session_refs(claim.text, inp.session_id, inp.prev_session_id)
            if scope == "session":
                session = inp.session_id  # "for this session" may be a clause of its own
            if session:
                text += f" in session {session}"
            if scope == "project":
                text = f"For project {project_id}, {lower_first(text)}"
            topic = topic_of(claim.kind, scope)
            text = capitalise(text) + "."
            candidates.append(Candidate(claim.entity, claim.kind, scope, project_id, text, topic))
    return candidates


def _stated_project(body: str) -> tuple[str, str]:
    """The project the sentence names, and the sentence without that phrase."""
    match = _PROJECT_LEAD.match(body)
    if match and (match["name"] or match["named"].lower() not in _NOT_PROJECTS):
        return match["name"] or match["named"], body[match.end() :]
    match = _FOR_NAME.match(body)
    if match and match["name"][0].isupper() and match["name"].lower() not in _NOT_PROJECTS:
        return match["name"], body[match.end() :]
    match = _PROJECT_ANYWHERE.search(body)
    if match:
        return match["name"], (body[: match.start()] + " " + body[match.end() :]).strip()
    return "", body


def clauses(body: str) -> list[str]:
    """`body` split where a new clause starts (see the module docstring)."""
    parts = _CLAUSE_SPLIT.split(body)
    found = [parts[0]]
    for separator, piece in zip(parts[1::2], parts[2::2], strict=True):
        stripped = LEAD.sub("", piece)
        if stripped and (_CLAUSE_START.match(stripped) or _CLAUSE_VERB.search(stripped)):
            found.append(stripped)
        else:
            found[-1] += separator + piece
    return [c.strip() for c in found if c.strip()]
