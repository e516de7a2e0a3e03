"""Recalled turns in the context, through the real API and the extraction worker:
a scripted conversation of three sessions is recorded through the API, archived
and extracted by the worker's runtime on the emulator, and the context of a
fourth session carries the archived turns that answer its question, each with its
session and date, under one budget with the memories."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.compaction_worker.handlers import Compaction
from services.compaction_worker.requests import compaction_request
from shared.db.unit_of_work import UnitsOfWork
from shared.embeddings import make_embedder
from shared.llm import OfflineLLM
from tests.bus_helpers import extraction_worker
from tests.support import wait_for
from tests.window_helpers import query

START = datetime(2024, 3, 4, 18, 0, tzinfo=UTC)  # a Monday evening
# (session, its day from START, [(user, assistant)]); each names the one before.
SESSIONS = [
    (
        "s1",
        0,
        [
            ("I finally went to that pottery class I told you about.", "Oh yes! And? How was it?"),
            ("Loved it, honestly so calming.", "Love that for you."),
            ("The weather has been grim all week.", "Same here."),
        ],
    ),
    (
        "s2",
        9,
        [
            ("I always use dark mode in every editor.", "Noted."),
            ("My new neighbour Ravi is a nurse, we chatted for ages.", "Nice!"),
            ("Ravi lent me a ladder, so kind.", "What a neighbour."),
        ],
    ),
    (
        "s3",
        20,
        [
            ("Tickets for the Lumen gig sold out in minutes.", "Typical."),
            ("My cousin keeps asking me to join her salsa class.", "Ha, no thanks?"),
        ],
    ),
]


def session_id(ids, name):
    return f"{ids['session_id']}-{name}"


def record_conversation(client, ids):
    """Every turn through the API, each session naming the one before; each flushed."""
    previous = ""
    for name, day, turns in SESSIONS:
        sid = session_id(ids, name)
        for n, (user, assistant) in enumerate(turns, start=1):
            body = {
                "user_id": ids["user_id"],
                "turn_id": f"{name}-t{n}",
                "user": user,
                "assistant": assistant,
                "created_at": (START + timedelta(days=day, minutes=2 * n)).isoformat(),
            }
            if previous and n == 1:
                body["prev_session_id"] = previous
            answer = client.post(f"/v1/sessions/{sid}/turns", json=body)
            assert answer.status_code == 202, answer.text
        flushed = client.post(f"/v1/sessions/{sid}:flush", json={"user_id": ids["user_id"]})
        assert flushed.status_code == 202, flushed.text
        previous = sid
    return sum(len(turns) for _n, _d, turns in SESSIONS)


def archived_and_extracted(pool, ids, turns):
    (archived,) = query(
        pool,
        "SELECT count(*) FROM episodes WHERE app = %s AND user_id = %s",
        ids["app"],
        ids["user_id"],
    )[0]
    (waiting,) = query(
        pool,
        "SELECT count(*) FROM extraction_pending WHERE app = %s AND user_id = %s",
        ids["app"],
        ids["user_id"],
    )[0]
    return archived == turns and waiting == 0


@pytest.fixture
def conversation(client, app_settings, pool, publisher, ids):
    """The scripted conversation, archived and extracted by the worker."""
    embedder = make_embedder(app_settings)
    with extraction_worker(app_settings, pool, OfflineLLM(), embedder, publisher):
        turns = record_conversation(client, ids)
        wait_for(lambda: archived_and_extracted(pool, ids, turns), 60, "the turns archived")
    return ids


def context(client, ids, question, **extra):
    body = {"user_id": ids["user_id"], "session_id": session_id(ids, "s4"), "query": question}
    answer = client.post("/v1/context", json={**body, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def recalled(found):
    """The recalled turns as (session, turn, the hit it is next to)."""
    return [
        (t["session_id"].rsplit("-", 1)[1], t["turn_id"], t["neighbour_of"])
        for t in found["recalled_turns"]
    ]


def sources(memory):
    return [(s["session_id"].rsplit("-", 1)[1], s["turn_id"]) for s in memory["sources"]]


def test_the_context_recalls_the_turns_that_answer_the_question(client, conversation):
    question = "What did I think of the pottery class?"
    found = context(client, conversation, question, token_budget=200)
    # The class, the verdict after it and the turn after that, as far as 200 tokens
    # go (one hit did not fit); s3's best hit is carried by its memory.
    assert recalled(found) == [
        ("s1", "s1-t1", None),
        ("s1", "s1-t2", None),
        ("s1", "s1-t3", None),
    ]
    first = found["recalled_turns"][0]
    assert first["created_at"] == "2024-03-04T18:02:00.000000Z"
    assert first["text"] == (
        "User: I finally went to that pottery class I told you about.\n"
        "Assistant: Oh yes! And? How was it?"
    )
    assert first["score"] > 0 and first["rankers"] == ["vector", "text"]
    instruction = found["system_instruction"]
    heading = f"### Session {session_id(conversation, 's1')}, Monday 4 March 2024, evening"
    assert instruction.index("## From earlier conversations") < instruction.index(heading)
    assert instruction.index(heading) < instruction.index("User: Loved it, honestly so calming.")
    # Every item says where it comes from; the memories and rules their turns.
    (rule,) = found["pinned_rules"]
    assert (rule["text"], rule["revision"], sources(rule)) == (
        "User always uses dark mode in every editor.",
        1,
        [("s2", "s2-t1")],
    )
    assert [(m["text"], m["revision"], sources(m)) for m in found["memories"]] == [
        ("User's cousin keeps asking them to join her salsa class.", 1, [("s3", "s3-t2")]),
        ("User's new neighbour Ravi is a nurse.", 1, [("s2", "s2-t2")]),
    ]
    assert found["tokens_by_section"] == {"rules": 18, "memories": 43, "recalled_turns": 81}
    assert found["tokens"] == 168  # the header's 26 tokens besides
    assert found["omitted"] == {"recalled_turns": 1}
    assert found["period"] is None and found["degraded"] == []


def test_a_turn_whose_memory_is_in_the_context_is_shown_once_as_the_memory(client, conversation):
    found = context(client, conversation, "Who is Ravi, my neighbour?")
    assert (found["memories"][0]["text"], sources(found["memories"][0])) == (
        "User's new neighbour Ravi is a nurse.",
        [("s2", "s2-t2")],
    )
    turns = recalled(found)
    assert ("s2", "s2-t2", None) not in turns and ("s2", "s2-t3", None) in turns
    assert found["system_instruction"].count("Ravi is a nurse") == 1
    # The rule's own turn is the rule's, too.
    assert all(turn != "s2-t1" for _s, turn, _n in turns)


def test_the_asking_sessions_recent_turns_are_not_recalled_again(client, conversation):
    body = {
        "user_id": conversation["user_id"],
        "session_id": session_id(conversation, "s3"),
        "query": "What about the salsa class and the Lumen gig?",
    }
    found = client.post("/v1/context", json=body).json()
    assert [t["turn_id"] for t in found["recent_turns"]] == ["s3-t1", "s3-t2"]
    assert [turn for s, turn, _n in recalled(found) if s == "s3"] == []
    assert recalled(found) != []


def test_each_section_can_be_capped_or_turned_off(client, conversation):
    question = "What did I think of the pottery class?"
    off = context(client, conversation, question, sections={"recalled_turns": 0})
    assert off["recalled_turns"] == [] and "earlier conversations" not in off["system_instruction"]
    assert "recalled_turns" not in off["omitted"]  # nothing was searched
    assert len(off["memories"]) == 2
    capped = context(client, conversation, question, sections={"recalled_turns": 60, "memories": 0})
    assert capped["memories"] == [] and capped["omitted"]["memories"] == 2
    assert 0 < capped["tokens_by_section"]["recalled_turns"] <= 60
    assert recalled(capped) == [("s1", "s1-t1", None)]
    no_rules = context(client, conversation, question, sections={"rules": 0})
    assert no_rules["pinned_rules"] == [] and no_rules["omitted"]["rules"] == 1


def test_a_named_period_is_searched_first_and_brings_the_summary_of_what_was_folded(
    client, conversation, app_settings, pool, publisher
):
    compaction = Compaction(
        UnitsOfWork(pool, "compaction"),
        OfflineLLM(),
        make_embedder(app_settings),
        app_settings,
        publisher,
    )
    # Fold the first session's turns (older than a day before the request).
    app, user = conversation["app"], conversation["user_id"]
    request = compaction_request(app, user, "", 1, 50, created_at=START + timedelta(days=5))
    assert compaction.handle_request(request, None) == "applied"
    asked = "2024-04-10T12:00:00Z"
    # k 1: the memory search brings Ravi's memory only; the fold comes by the period.
    march = context(client, conversation, "What did Ravi do in March?", asked_at=asked, k=1)
    assert march["period"] == {
        "phrase": "in March",
        "start": "2024-03-01T00:00:00.000000Z",
        "end": "2024-04-01T00:00:00.000000Z",
    }
    assert [m["text"] for m in march["memories"]] == ["User's new neighbour Ravi is a nurse."]
    (summary,) = march["long_term_summaries"]
    assert summary["text"] == "User said: I finally went to that pottery class I told you about."
    assert (summary["score"], summary["revision"], summary["sources"]) == (None, 1, [])
    assert "## Summaries of older conversations" in march["system_instruction"]
    assert {s for s, _t, _n in recalled(march)} == {"s2", "s3"}  # s1 was folded
    # A period after everything the fold holds does not bring it.
    april = context(client, conversation, "What did Ravi do in April?", asked_at=asked, k=1)
    assert april["period"]["start"] == "2024-04-01T00:00:00.000000Z"
    assert april["long_term_summaries"] == []


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"sections": {"anecdotes": 10}}, "sections.anecdotes"),
        ({"sections": {"memories": -1}}, "sections.memories"),
        ({"sections": {"memories": "10"}}, "sections.memories"),
        ({"sections": {"recalled_turns": 900}, "token_budget": 800}, "sections.recalled_turns"),
        ({"sections": {"summary": 2001}}, "sections.summary"),  # over the default budget
        ({"asked_at": "yesterday"}, "asked_at"),
    ],
)
def test_a_bad_cap_is_a_422_naming_it(client, ids, extra, field):
    body = {"user_id": ids["user_id"], "session_id": "s", "query": "tea", **extra}
    answer = client.post("/v1/context", json=body)
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]


def test_turns_next_to_a_hit_are_only_those_the_scope_may_see(
    client, app_settings, pool, publisher, ids
):
    """A session may hold turns of several projects: a hit's neighbours of another
    project stay out, in the archive search and in the context."""
    sid, user = session_id(ids, "mixed"), ids["user_id"]
    turns = [
        ("", "I finally went to that pottery class I told you about."),
        ("atlas", "The Atlas launch code name is Bluebird."),
        ("", "Loved the pottery, honestly so calming."),
    ]
    embedder = make_embedder(app_settings)
    with extraction_worker(app_settings, pool, OfflineLLM(), embedder, publisher):
        for n, (project, text) in enumerate(turns, start=1):
            body = {"user_id": user, "turn_id": f"m-t{n}", "user": text, "assistant": "Ok."}
            if project:
                body["project_id"] = project
            assert client.post(f"/v1/sessions/{sid}/turns", json=body).status_code == 202
        client.post(f"/v1/sessions/{sid}:flush", json={"user_id": user})
        wait_for(lambda: archived_and_extracted(pool, ids, len(turns)), 60, "the turns archived")
    search = {"user_id": user, "project_id": "beta", "query": "pottery class", "context_turns": 2}
    found = client.post("/v1/archive:search", json=search).json()["episodes"]
    shown = {e["turn_id"] for e in found} | {t["turn_id"] for e in found for t in e["context"]}
    assert shown == {"m-t1", "m-t3"}
    asked = {"user_id": user, "session_id": "ask", "project_id": "beta", "query": "pottery class"}
    context = client.post("/v1/context", json=asked).json()
    assert {t["turn_id"] for t in context["recalled_turns"]} == {"m-t1", "m-t3"}
    assert "Bluebird" not in context["system_instruction"]
    # Within the project it is there (as the memory the worker made of it).
    atlas = client.post("/v1/context", json={**asked, "project_id": "atlas"}).json()
    assert "Bluebird" in atlas["system_instruction"]
