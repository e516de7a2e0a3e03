"""The memory tasks of the `offline` provider (extraction, consolidation,
decomposition) and the strict reading of the `gemini` provider's replies."""

import json
from dataclasses import fields
from datetime import UTC, datetime

import pytest

from shared.entities.names import Mention
from shared.llm import (
    Candidate,
    Decision,
    ExistingMemory,
    ExtractionInput,
    ExtractionTurn,
    Found,
    MalformedReply,
    OfflineLLM,
    Weighing,
)
from shared.llm.extraction_prompts import (
    consolidation_prompt,
    extraction_instruction,
    extraction_prompt,
    parse_decisions,
    parse_found,
)
from shared.llm.task_prompts import parse_queries
from shared.llm.topics import Topics, of_setting, topic_of
from shared.tokens import estimate_tokens

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SESSION = "sess_2026_01"


def _extract(user, project_id="", session_id=SESSION, prev_session_id="", assistant="Noted."):
    inp = ExtractionInput.single(session_id, project_id, prev_session_id, T0, user, assistant)
    return [found.candidate for found in OfflineLLM().extract(inp).value]


def _decide(llm, candidate, existing):
    """One candidate's decision, through the batched task."""
    (decision,) = llm.consolidate([Weighing(candidate, tuple(existing))]).value
    return decision


def _existing(candidate, memory_id):
    c = candidate
    return ExistingMemory(memory_id, c.entity_name, c.kind, c.scope, c.project_id, c.text)


# -- the reference scenario ---------------------------------------------------
def _rules(entity: str, kind: str, scope: str, project_id: str, text: str) -> Candidate:
    """A candidate as the `offline` provider makes it: filed under a managed topic by its
    kind (test_the_rules_file_each_memory_under_a_managed_topic pins the mapping)."""
    return Candidate(entity, kind, scope, project_id, text, topic_of(kind, scope))


def test_the_reference_scenario_extracts_exactly_these_memories():
    universal = _extract(
        "As universal coding preferences across all my projects, I prefer Dark Mode UI and "
        "standardizing on Python 3.11 with PostgreSQL."
    )
    assert universal == [
        _rules("ui theme", "preference", "global", "", "User prefers Dark Mode UI."),
        _rules(
            "programming language",
            "preference",
            "global",
            "",
            "User prefers standardizing on Python 3.11 with PostgreSQL.",
        ),
    ]
    project = _extract(
        "For project CloudRetail, the backend is FastAPI on AlloyDB, the short-term cache is "
        "Memorystore for Valkey, all tool execution timeouts must be capped at 30 seconds, and "
        "the region is us-east1.",
        project_id="CloudRetail",
    )
    p = ("project", "CloudRetail")
    assert project == [
        _rules(
            "backend", "fact", *p, "For project CloudRetail, the backend is FastAPI on AlloyDB."
        ),
        _rules(
            "cache",
            "fact",
            *p,
            "For project CloudRetail, the short-term cache is Memorystore for Valkey.",
        ),
        _rules(
            "tool execution timeout",
            "rule",
            *p,
            "For project CloudRetail, all tool execution timeouts must be capped at 30 seconds.",
        ),
        _rules("region", "fact", *p, "For project CloudRetail, the region is us-east1."),
    ]
    assert _extract("Can you explain how Python list comprehensions work?") == []
    assert _extract("What's the difference between TCP and UDP?") == []
    (light,) = _extract("I've switched to Light Mode.")
    assert light == _rules("ui theme", "preference", "global", "", "User prefers Light Mode.")
    # Against what the first turn stored: the newer statement replaces the Dark Mode one.
    existing = [_existing(universal[1], "mem-lang"), _existing(universal[0], "mem-theme")]
    decision = _decide(OfflineLLM(), light, existing)
    assert decision == Decision("UPDATED", "mem-theme", "User prefers Light Mode.")


def test_the_project_turn_stated_without_a_project_in_the_text_is_still_the_turns():
    (region,) = _extract("The region is us-east1.", project_id="CloudRetail")
    assert region == _rules(
        "region",
        "fact",
        "project",
        "CloudRetail",
        "For project CloudRetail, the region is us-east1.",
    )


# -- extraction ---------------------------------------------------------------
def test_chatter_greetings_questions_and_requests_give_nothing():
    assert _extract("Hi there! Thanks, that helps. The weather is nice today.") == []
    assert _extract("Python is great. Could you write a function that sorts a list?") == []
    assert _extract("I'd like a summary of the meeting. Never mind.") == []
    assert _extract("My last session was fun?") == []


def test_a_move_is_a_fact_not_a_preference():
    (moved,) = _extract("I've moved to Berlin.")
    assert (moved.kind, moved.text) == ("fact", "User moved to Berlin.")


def test_the_assistants_text_is_not_read():
    assert _extract("Sounds good.", assistant="I prefer Go. Remember that Go is fast.") == []


@pytest.mark.parametrize(
    ("user", "project_id", "expected"),
    [
        (
            "Remember that my editor is vim.",
            "",
            _rules("editor", "fact", "global", "", "User's editor is vim."),
        ),
        (
            "Remember that deploys are limited to weekdays.",
            "",
            _rules("deploy", "rule", "global", "", "Deploys are limited to weekdays."),
        ),
        (
            "Remember that I have two monitors.",
            "",
            _rules("two monitor", "fact", "global", "", "User has two monitors."),
        ),
        (
            "I always write tests first.",
            "",
            _rules("tests first", "rule", "global", "", "User always writes tests first."),
        ),
        (
            "We must never deploy on Fridays.",
            "",
            _rules("deploy", "rule", "global", "", "User must never deploy on Fridays."),
        ),
        (
            "Never use print for logging.",
            "",
            _rules(
                "print",
                "rule",
                "global",
                "",
                "User wants the assistant to never use print for logging.",
            ),
        ),
        (
            "I'd rather use Go than Java.",
            "",
            _rules(
                "programming language",
                "preference",
                "global",
                "",
                "User would rather use Go than Java.",
            ),
        ),
        (
            "I like FastAPI, Django and Flask.",
            "",
            _rules("backend", "preference", "global", "", "User likes FastAPI, Django and Flask."),
        ),
        (
            "My favourite editor is Neovim.",
            "",
            _rules("editor", "preference", "global", "", "User's favourite editor is Neovim."),
        ),
        (
            "In project Atlas the database is AlloyDB.",
            "",
            _rules(
                "database",
                "fact",
                "project",
                "Atlas",
                "For project Atlas, the database is AlloyDB.",
            ),
        ),
        (
            "For Atlas, the cache is Redis.",
            "",
            _rules("cache", "fact", "project", "Atlas", "For project Atlas, the cache is Redis."),
        ),
        (
            "In general, I prefer tabs over spaces.",
            "Atlas",
            _rules("indentation", "preference", "global", "", "User prefers tabs over spaces."),
        ),
        (
            "I prefer concise answers with examples.",
            "Atlas",
            _rules(
                "concise answer",
                "preference",
                "project",
                "Atlas",
                "For project Atlas, the user prefers concise answers with examples.",
            ),
        ),
        (
            "For this session, I prefer verbose logs.",
            "Atlas",
            _rules(
                "verbose log",
                "preference",
                "session",
                "",
                "User prefers verbose logs in session sess_2026_01.",
            ),
        ),
        (
            "From now on, I use tabs.",
            "",
            _rules("indentation", "preference", "global", "", "User uses tabs."),
        ),
    ],
)
def test_explicit_statements_become_these_memories(user, project_id, expected):
    assert _extract(user, project_id=project_id) == [expected]


def test_now_and_last_session_become_explicit_session_ids():
    assert _extract("I prefer Python now.", prev_session_id="sess_2025_12") == [
        _rules(
            "programming language",
            "preference",
            "global",
            "",
            "User prefers Python in session sess_2026_01.",
        )
    ]
    assert _extract("I now use Neovim.") == [
        _rules("editor", "preference", "global", "", "User uses Neovim in session sess_2026_01.")
    ]
    assert _extract("In my previous session I preferred light mode, I prefer Go.")[0].text == (
        "User prefers Go."  # a past narrative states nothing; the preference stays as is
    )
    (previous,) = _extract("My deadline in the previous session was Friday.", prev_session_id="s0")
    assert previous.text == "User's deadline was Friday in session s0."
    # With no previous session known, the reference is left as it is.
    (unknown,) = _extract("My deadline in the previous session was Friday.")
    assert unknown.text == "User's deadline in the previous session was Friday."


def test_the_same_thing_said_twice_in_a_turn_is_one_candidate():
    assert len(_extract("I prefer dark mode. I prefer dark mode!")) == 1


def test_revocations_delete_the_memory_they_revoke_and_nothing_else():
    llm = OfflineLLM()
    (dark,) = _extract("I prefer Dark Mode UI.")
    (editor,) = _extract("My editor is vim.")
    existing = [_existing(dark, "m-theme"), _existing(editor, "m-editor")]
    revocations = _extract(
        "I no longer prefer dark mode. Forget that my editor is vim. I don't use Java anymore."
    )
    assert [c.text for c in revocations] == [
        "User no longer prefers dark mode.",
        "User's editor is no longer vim.",
        "User no longer uses Java.",
    ]
    assert [c.entity_name for c in revocations] == ["ui theme", "editor", "programming language"]
    decisions = [_decide(llm, c, existing) for c in revocations]
    assert decisions == [
        Decision("DELETED", "m-theme", ""),
        Decision("DELETED", "m-editor", ""),
        Decision("NONE", None, ""),  # nothing to revoke
    ]


# -- consolidation ------------------------------------------------------------
def test_consolidation_creates_skips_duplicates_and_matches_by_similar_text():
    llm = OfflineLLM()
    dark = ExistingMemory(
        "m1", "ui theme", "preference", "global", "", "User prefers Dark Mode UI."
    )
    new = _rules("editor", "preference", "global", "", "User uses Neovim.")
    assert _decide(llm, new, [dark]) == Decision("CREATED", None, "User uses Neovim.")
    assert _decide(llm, new, []) == Decision("CREATED", None, "User uses Neovim.")
    same = _rules("ui theme", "preference", "global", "", "User prefers dark mode UI!")
    assert _decide(llm, same, [dark]) == Decision("NONE", "m1", "")
    # Another provider's entity name: the text decides (Jaccard 1.0, a duplicate).
    other_name = _rules("ui_theme_preference", "preference", "global", "", same.text)
    assert _decide(llm, other_name, [dark]) == Decision("NONE", "m1", "")


def test_a_memory_of_another_scope_or_project_is_never_a_target():
    llm = OfflineLLM()
    theirs = ExistingMemory(
        "m1", "cache", "fact", "project", "Atlas", "For project Atlas, the cache is Redis."
    )
    mine = _rules("cache", "fact", "project", "Zephyr", "For project Zephyr, the cache is Valkey.")
    assert _decide(llm, mine, [theirs]).action == "CREATED"
    global_ = _rules("cache", "fact", "global", "", "The cache is Redis.")
    assert _decide(llm, global_, [theirs]).action == "CREATED"


def test_the_rules_tasks_count_the_tokens_gemini_would_be_sent_and_are_deterministic():
    from shared.llm import extraction_prompts
    from shared.llm import task_prompts as prompts

    llm = OfflineLLM()
    inp = ExtractionInput.single(SESSION, "", "", T0, "I prefer Dark Mode UI.", "Noted.")
    completion = llm.extract(inp)
    prompt = extraction_prompts.extraction_instruction(inp) + extraction_prompts.extraction_prompt(
        inp
    )
    assert completion.usage.input_tokens == estimate_tokens(prompt)
    (found,) = completion.value
    assert found.turn_id == "turn"
    assert found.candidate.text == "User prefers Dark Mode UI."
    reply = json.dumps([{"turn": "turn", **found.candidate.__dict__}])
    assert completion.usage.output_tokens == estimate_tokens(reply)
    assert llm.extract(inp) == completion
    query = llm.decompose("What is my theme?", SESSION, "")
    assert query.usage.input_tokens == estimate_tokens(
        prompts.decomposition_instruction(SESSION, "")
        + prompts.decomposition_prompt("What is my theme?")
    )


def test_a_window_is_one_extraction_whose_candidates_name_their_turns():
    turns = (
        ExtractionTurn("a", "", T0, "I prefer Dark Mode UI.", "Noted."),
        ExtractionTurn("b", "Orion", T0, "How are you?", "Fine."),
        ExtractionTurn("c", "Orion", T0, "The region is us-east1.", "Noted."),
    )
    found = OfflineLLM().extract(ExtractionInput(SESSION, "", turns)).value
    assert found == [
        Found("a", _rules("ui theme", "preference", "global", "", "User prefers Dark Mode UI.")),
        Found(
            "c",
            _rules(
                "region", "fact", "project", "Orion", "For project Orion, the region is us-east1."
            ),
        ),
    ]


# -- decomposition ------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "What is my UI theme and which database do I use?",
            ["What is my UI theme?", "Which database do I use?"],
        ),
        (
            "What's the difference between TCP and UDP?",
            ["What's the difference between TCP and UDP?"],
        ),
        ("backend of CloudRetail", ["backend of CloudRetail"]),
        (
            "What did I decide in my previous session; what is my editor now?",
            [
                "What did I decide in session sess_2025_12?",
                "What is my editor in session sess_2026_01?",
            ],
        ),
        (
            "What is my theme? Which cache? Which region? What timeout? Which editor?",
            ["What is my theme?", "Which cache?", "Which region?", "What timeout? Which editor?"],
        ),
        ("Which theme did I use last session?", ["Which theme did I use in session sess_2025_12?"]),
    ],
)
def test_decomposition_splits_into_single_topic_questions_with_session_ids(query, expected):
    assert OfflineLLM().decompose(query, SESSION, "sess_2025_12").value == expected


# -- reading gemini's replies ---------------------------------------------------
INP = ExtractionInput(
    SESSION,
    "sess_2025_12",
    (
        ExtractionTurn("turn-1", "CloudRetail", T0, "I prefer tabs.", "Noted."),
        ExtractionTurn("turn-2", "", T0, "My editor is vim.", "Noted."),
    ),
)
GOOD = {
    "turn": "t1",
    "entity_name": " UI  Theme ",
    "kind": "preference",
    "scope": "global",
    "project_id": "",
    "text": "User prefers Dark Mode UI.",
    "topic": "preferences",
}


def test_a_good_extraction_reply_is_read_exactly():
    reply = {
        "memories": [
            GOOD,
            {**GOOD, "entity_name": "region", "kind": "fact", "scope": "project", "project_id": ""},
            {**GOOD, "turn": "t2", "scope": "project", "project_id": ""},
            {**GOOD, "turn": "t2", "scope": "session", "project_id": "stray"},
        ]
    }
    dark = "User prefers Dark Mode UI."
    assert parse_found(reply, INP) == [
        Found("turn-1", Candidate("ui theme", "preference", "global", "", dark, "preferences")),
        Found("turn-1", Candidate("region", "fact", "project", "CloudRetail", dark, "preferences")),
        # A turn of no project whose memory names none: the model's mistake stays visible.
        Found("turn-2", Candidate("ui theme", "preference", "project", "", dark, "preferences")),
        Found("turn-2", Candidate("ui theme", "preference", "session", "", dark, "preferences")),
    ]
    assert parse_found({"memories": []}, INP) == []


def test_the_entities_a_reply_names_are_read_with_its_memory():
    named = [{"name": "Dana Lee", "kind": "person"}, {"name": "Acme", "kind": "organisation"}]
    (found,) = parse_found({"memories": [{**GOOD, "entities": named}]}, INP)
    assert found.candidate.entities == (
        Mention("Dana Lee", "person"),
        Mention("Acme", "organisation"),
    )


@pytest.mark.parametrize(
    "reply",
    [
        [],
        {},
        {"memories": "none"},
        {"memories": ["User prefers tabs."]},
        {"memories": [{**GOOD, "kind": "opinion"}]},
        {"memories": [{**GOOD, "scope": "team"}]},
        {"memories": [{k: v for k, v in GOOD.items() if k != "project_id"}]},
        {"memories": [{**GOOD, "text": ""}]},
        {"memories": [{**GOOD, "entity_name": 3}]},
        {"memories": [{**GOOD, "turn": "t3"}]},
        {"memories": [{k: v for k, v in GOOD.items() if k != "turn"}]},
        {"memories": [{**GOOD, "entities": "Dana"}]},
        {"memories": [{**GOOD, "entities": [{"name": "Dana", "kind": "friend"}]}]},
        {"memories": [{**GOOD, "entities": [{"kind": "person"}]}]},
    ],
    ids=[
        "list",
        "no-memories",
        "string",
        "item-string",
        "kind",
        "scope",
        "missing-field",
        "empty-text",
        "wrong-type",
        "unknown-turn",
        "no-turn",
        "entities-not-a-list",
        "entity-kind",
        "entity-without-name",
    ],
)
def test_an_extraction_reply_that_does_not_fit_is_malformed(reply):
    with pytest.raises(MalformedReply):
        parse_found(reply, INP)


DARK = ExistingMemory(
    "0b1e-dark", "ui theme", "preference", "global", "", "User prefers Dark Mode UI."
)
EDITOR = ExistingMemory("0b1e-editor", "editor", "fact", "global", "", "User's editor is vim.")
WEIGHINGS = [
    Weighing(
        Candidate("ui theme", "preference", "global", "", "User prefers Light Mode."), (DARK,)
    ),
    Weighing(Candidate("editor", "fact", "global", "", "User's editor is Emacs."), (EDITOR, DARK)),
]


def test_memories_go_by_short_labels_listed_once():
    prompt = consolidation_prompt(WEIGHINGS)
    assert "0b1e" not in prompt
    assert prompt.count("User prefers Dark Mode UI.") == 1
    assert "- m1: entity: ui theme" in prompt and "- m2: entity: editor" in prompt
    assert "text: User prefers Light Mode.; may change: m1" in prompt
    assert "may change: m2, m1" in prompt


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        (
            {"action": "CREATED", "target": None, "text": " New. "},
            Decision("CREATED", None, "New."),
        ),
        (
            {"action": "UPDATED", "target": "m2", "text": "Merged."},
            Decision("UPDATED", "0b1e-editor", "Merged."),
        ),
        (
            {"action": "DELETED", "target": "m1", "text": "x"},
            Decision("DELETED", "0b1e-dark", ""),
        ),
        ({"action": "NONE", "target": "m2", "text": ""}, Decision("NONE", "0b1e-editor", "")),
        ({"action": "NONE", "target": None, "text": ""}, Decision("NONE", None, "")),
        ({"action": "NONE", "target": "", "text": ""}, Decision("NONE", None, "")),
    ],
)
def test_a_good_consolidation_reply_is_read_exactly(second, expected):
    first = {"candidate": "c1", "action": "UPDATED", "target": "m1", "text": "Light."}
    # The decisions come back in the candidates' order whatever the reply's order.
    reply = {"decisions": [{"candidate": "c2", **second}, first]}
    assert parse_decisions(reply, WEIGHINGS) == [
        Decision("UPDATED", "0b1e-dark", "Light."),
        expected,
    ]


@pytest.mark.parametrize(
    "second",
    [
        {"action": "UPDATED", "target": "m9", "text": "Merged."},
        {"action": "DELETED", "target": None, "text": ""},
        {"action": "UPDATED", "target": "m2", "text": ""},
        {"action": "CREATED", "target": "m2", "text": "New."},
        {"action": "CREATED", "target": None, "text": " "},
        {"action": "MERGED", "target": "m2", "text": "x"},
        {"action": "NONE", "text": ""},
        {"action": "NONE", "target": 1, "text": ""},
        {"action": "NONE", "target": "0b1e-editor", "text": ""},
    ],
    ids=[
        "unknown-target",
        "delete-nothing",
        "update-no-text",
        "create-with-target",
        "create-no-text",
        "action",
        "missing-target",
        "target-type",
        "an-id-not-a-label",
    ],
)
def test_a_consolidation_reply_that_does_not_fit_is_malformed(second):
    first = {"candidate": "c1", "action": "NONE", "target": "m1", "text": ""}
    with pytest.raises(MalformedReply):
        parse_decisions({"decisions": [first, {"candidate": "c2", **second}]}, WEIGHINGS)


@pytest.mark.parametrize(
    "decisions",
    [
        [],
        [{"candidate": "c1", "action": "NONE", "target": None, "text": ""}],
        [{"candidate": c, "action": "NONE", "target": None, "text": ""} for c in ("c1", "c1")],
        [{"candidate": c, "action": "NONE", "target": None, "text": ""} for c in ("c1", "c3")],
    ],
    ids=["none", "one-missing", "twice", "unknown-candidate"],
)
def test_a_consolidation_reply_decides_each_candidate_exactly_once(decisions):
    with pytest.raises(MalformedReply):
        parse_decisions({"decisions": decisions}, WEIGHINGS)


def test_a_candidate_may_change_only_its_own_memories():
    # m1 is the first candidate's neighbour only: the second may not target it.
    weighings = [WEIGHINGS[0], Weighing(WEIGHINGS[1].candidate, (EDITOR,))]
    reply = {
        "decisions": [
            {"candidate": "c1", "action": "NONE", "target": None, "text": ""},
            {"candidate": "c2", "action": "DELETED", "target": "m1", "text": ""},
        ]
    }
    with pytest.raises(MalformedReply):
        parse_decisions(reply, weighings)


def test_decomposition_replies_hold_one_to_four_queries():
    assert parse_queries({"queries": [" What is  my theme? "]}) == ["What is my theme?"]
    for bad in ({"queries": []}, {"queries": ["a", "b", "c", "d", "e"]}, {"queries": [""]}, {}):
        with pytest.raises(MalformedReply):
            parse_queries(bad)


def test_the_extraction_prompt_holds_the_texts_and_the_session_ids():
    assert {f.name for f in fields(ExtractionTurn)} == {
        "turn_id",
        "project_id",
        "observed_at",
        "user",
        "assistant",
    }
    prompt = extraction_prompt(INP)
    assert "User: I prefer tabs." in prompt and "Assistant: Noted." in prompt
    assert "[t1] 2026-01-01T00:00:00+00:00, project CloudRetail" in prompt
    assert "[t2] 2026-01-01T00:00:00+00:00, no project" in prompt
    assert "turn-1" not in prompt  # turns go by their labels
    instruction = extraction_instruction(INP)
    assert '"in session sess_2026_01"' in instruction
    assert '"in session sess_2025_12"' in instruction
    assert "ignore tool calls and tool outputs" in instruction


def test_memories_without_an_entity_name_match_by_text_only():
    from shared.llm.base import Candidate, ExistingMemory
    from shared.llm.offline.consolidation import decide

    staging = ExistingMemory("m1", "", "fact", "global", "", "The staging database is orchid.")
    dog = Candidate("", "fact", "global", "", "The user walks a dog every morning.")
    assert decide(dog, [staging]).action == "CREATED"


@pytest.mark.parametrize(
    ("user", "project_id", "topic"),
    [
        ("I prefer tabs over spaces.", "", "preferences"),
        ("We must never deploy on Fridays.", "", "rules"),
        ("My editor is vim.", "", "personal_info"),
        ("The region is us-east1.", "Orion", "key_conversation_details"),
    ],
)
def test_the_rules_file_each_memory_under_a_managed_topic(user, project_id, topic):
    (found,) = _extract(user, project_id)
    assert found.topic == topic


def test_the_rules_keep_only_the_managed_topics_an_app_keeps():
    turns = (
        ExtractionTurn("a", "", T0, "I prefer tabs over spaces.", "Noted."),
        ExtractionTurn("b", "", T0, "We must never deploy on Fridays.", "Noted."),
    )
    no_preferences = Topics(("rules", "personal_info"), configured=True)
    found = OfflineLLM().extract(ExtractionInput(SESSION, "", turns, no_preferences)).value
    assert [(f.turn_id, f.candidate.topic) for f in found] == [("b", "rules")]


def test_a_memorys_metadata_is_the_apps_with_its_custom_topics_over_it():
    topics = of_setting(
        {
            "managed_topics": ["rules"],
            "custom_topics": [
                {"name": "travel", "description": "trips", "metadata": {"source": "travel"}},
                {"name": "food", "description": "meals"},
            ],
            "metadata": {"source": "extracted", "app": 1},
        }
    )
    assert topics.metadata_of("travel") == {"source": "travel", "app": 1}
    assert topics.metadata_of("food") == {"source": "extracted", "app": 1}
    assert topics.metadata_of("rules") == {"source": "extracted", "app": 1}
    # A setting stored before the config had metadata: none.
    stored = of_setting({"managed_topics": ["rules"], "custom_topics": []})
    assert stored.metadata_of("rules") == {}
