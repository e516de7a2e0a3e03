"""The `offline` consolidator notices a changed fact: a new statement of the same
subject and predicate with another value updates the memory, the same value is a
duplicate, and another fact is kept beside it (`shared.llm.offline.consolidation`,
its clauses read by `shared.llm.offline.clauses`)."""

import pytest

from shared.llm import Candidate, Decision, ExistingMemory, OfflineLLM, Weighing
from shared.llm.offline.clauses import Clause, parse

UPDATE, KEEP_BOTH, DUPLICATE, RETIRE, NOTHING_TO_RETIRE = (
    "update",
    "keep both",
    "duplicate",
    "retire",
    "nothing to retire",
)
_OUTCOMES = (UPDATE, KEEP_BOTH, DUPLICATE, RETIRE, NOTHING_TO_RETIRE)

# (the memory, the new statement, what consolidation does with the statement)
PAIRS = [
    # -- the same subject and predicate, another value: the memory is updated
    ("The Heron build uses gcc 12.", "The Heron build now uses gcc 14.", UPDATE),
    ("Alice lives in Paris.", "Alice moved to Berlin.", UPDATE),
    ("The deadline is Friday.", "The deadline moved to Monday.", UPDATE),
    ("The Heron build uses gcc 12.", "The Heron build switched to gcc 14.", UPDATE),
    ("The team uses Jenkins for CI.", "The team switched to GitHub Actions for CI.", UPDATE),
    ("The API timeout is 30 seconds.", "The API timeout changed to 60 seconds.", UPDATE),
    ("The API timeout is 30 seconds.", "The API timeout is now 60 seconds.", UPDATE),
    ("The release is scheduled for March 3.", "The release was postponed to March 10.", UPDATE),
    ("Bob works at Acme.", "Bob now works for Globex.", UPDATE),
    ("The office is based in Lisbon.", "The office relocated to Porto.", UPDATE),
    ("The cache is Redis.", "The cache is Valkey.", UPDATE),
    ("The meeting is on Tuesday.", "The meeting has been moved to Thursday.", UPDATE),
    ("The team uses Jenkins.", "The team uses GitHub Actions instead of Jenkins.", UPDATE),
    ("The deadline is Friday.", "The deadline was moved from Friday to next Monday.", UPDATE),
    ("The Heron build uses gcc 12.", "The Heron build no longer uses gcc 12 but gcc 14.", UPDATE),
    (
        "The Heron build targets x86-64.",
        "The Heron build now targets ARM64 instead of x86-64.",
        UPDATE,
    ),
    # Another value of the same facet (`shared.llm.offline.facets`), as extraction names it.
    ("User uses vim.", "User now uses Neovim.", UPDATE),
    ("User prefers Python.", "User prefers Rust.", UPDATE),
    ("User prefers Python 3.11.", "User prefers Python 3.12.", UPDATE),
    ("Alice resides in Paris.", "From now on, Alice lives in Rome.", UPDATE),
    (
        "For project CloudRetail, the region is us-east1.",
        "For project CloudRetail, the region is now europe-west1.",
        UPDATE,
    ),
    ("The standup is at 9am.", "The standup moved to 10am.", UPDATE),
    ("The staging database is orchid.", "The staging database is lotus.", UPDATE),
    ("User's editor is vim.", "User's editor is helix.", UPDATE),
    # -- another subject, another predicate, or a second value: both are kept
    ("The Heron build uses gcc 12.", "The Osprey build uses gcc 14.", KEEP_BOTH),
    ("The Heron build uses gcc 12.", "The Osprey build uses gcc 12.", KEEP_BOTH),
    ("Alice lives in Paris.", "Alice works at Acme.", KEEP_BOTH),
    ("Alice lives in Paris.", "Bob moved to Berlin.", KEEP_BOTH),
    ("The team uses Jenkins.", "The team uses Slack.", KEEP_BOTH),
    # "Now" alone does not say which value the new one replaces, if any.
    ("The team uses Jenkins.", "The team now uses Slack.", KEEP_BOTH),
    ("User uses VS Code.", "User now uses Docker.", KEEP_BOTH),
    ("Alice is a doctor.", "Alice is a runner.", KEEP_BOTH),
    ("The deadline is Friday.", "The budget is 5000 euros.", KEEP_BOTH),
    ("User prefers Python.", "User prefers concise answers.", KEEP_BOTH),
    ("The Heron build uses gcc 12.", "The Heron build uses CMake.", KEEP_BOTH),
    ("The staging database is orchid.", "The user walks a dog every morning.", KEEP_BOTH),
    ("Alice is tall.", "Alice is vegetarian.", KEEP_BOTH),
    ("The project is open source.", "The project is fast.", KEEP_BOTH),
    ("Alice works in Paris.", "Alice lives in Paris.", KEEP_BOTH),
    # -- the same value again, however it is put: nothing is written
    ("The Heron build uses gcc 12.", "The Heron build uses GCC 12!", DUPLICATE),
    ("The Heron build uses gcc 14.", "The Heron build now uses gcc 14.", DUPLICATE),
    ("Alice lives in Paris.", "Alice still lives in Paris.", DUPLICATE),
    ("Alice lives in Paris.", "Alice resides in Paris.", DUPLICATE),
    ("The deadline is Friday.", "The deadline is on Friday.", DUPLICATE),
    ("User prefers Dark Mode UI.", "User prefers dark mode UI!", DUPLICATE),
    ("The cache is Redis.", "The cache is currently Redis.", DUPLICATE),
    ("The user walks a dog every morning.", "The user walks a dog every morning!", DUPLICATE),
    # -- "no longer": the value it names is retired, another one is not
    ("Alice lives in Paris.", "Alice no longer lives in Paris.", RETIRE),
    ("The Heron build uses gcc 12.", "The Heron build no longer uses gcc.", RETIRE),
    ("Alice lives in Berlin.", "Alice no longer lives in Paris.", NOTHING_TO_RETIRE),
]


def _decide(new: str, *memories: ExistingMemory) -> Decision:
    """A direct write's decision (no entity name: the texts decide), through the
    provider's batched task."""
    candidate = Candidate("", "fact", "global", "", new)
    (decision,) = OfflineLLM().consolidate([Weighing(candidate, memories)]).value
    return decision


def _memory(memory_id: str, text: str) -> ExistingMemory:
    return ExistingMemory(memory_id, "", "fact", "global", "", text)


def _expected(outcome: str, new: str) -> Decision:
    return {
        UPDATE: Decision("UPDATED", "m1", new),
        KEEP_BOTH: Decision("CREATED", None, new),
        DUPLICATE: Decision("NONE", "m1", ""),
        RETIRE: Decision("DELETED", "m1", ""),
        NOTHING_TO_RETIRE: Decision("NONE", None, ""),
    }[outcome]


@pytest.mark.parametrize(("old", "new", "outcome"), PAIRS, ids=[p[1] for p in PAIRS])
def test_each_pair_of_statements_has_exactly_its_outcome(old, new, outcome):
    assert _decide(new, _memory("m1", old)) == _expected(outcome, new)


def test_the_table_covers_each_outcome():
    counts = {o: sum(1 for *_, outcome in PAIRS if outcome == o) for o in _OUTCOMES}
    assert counts == {UPDATE: 24, KEEP_BOTH: 15, DUPLICATE: 8, RETIRE: 2, NOTHING_TO_RETIRE: 1}


def test_among_several_memories_the_one_of_the_same_fact_is_updated():
    memories = (
        _memory("m-paris", "Alice lives in Paris."),
        _memory("m-gcc", "The Heron build uses gcc 12."),
        _memory("m-osprey", "The Osprey build uses gcc 12."),
        _memory("m-deadline", "The deadline is Friday."),
    )
    new = "The Heron build now uses gcc 14."
    assert _decide(new, *memories) == Decision("UPDATED", "m-gcc", new)
    new = "The deadline moved to Monday."
    assert _decide(new, *memories) == Decision("UPDATED", "m-deadline", new)


def test_a_change_of_one_of_several_values_names_which_or_changes_none():
    memories = (
        _memory("m-jenkins", "The team uses Jenkins."),
        _memory("m-slack", "The team uses Slack."),
    )
    # Which of the two the team no longer uses is not said: both are kept.
    new = "The team switched to GitHub Actions."
    assert _decide(new, *memories) == Decision("CREATED", None, new)
    new = "The team switched from Jenkins to GitHub Actions."
    assert _decide(new, *memories) == Decision("UPDATED", "m-jenkins", new)


def test_the_entity_name_still_comes_first():
    # Extraction names both "editor": the memory of that entity is the target.
    editor = ExistingMemory("m1", "editor", "preference", "global", "", "User uses vim.")
    neovim = Candidate("editor", "preference", "global", "", "User prefers Neovim.")
    (decision,) = OfflineLLM().consolidate([Weighing(neovim, (editor,))]).value
    assert decision == Decision("UPDATED", "m1", "User prefers Neovim.")


@pytest.mark.parametrize(
    ("text", "clause"),
    [
        (
            "The Heron build now uses gcc 14.",
            Clause("heron build", "use", "gcc 14", single=False),
        ),
        (
            "Alice moved to Berlin.",
            Clause("alice", "location", "berlin", single=True, replaces=True),
        ),
        (
            "The deadline was moved from Friday to Monday.",
            Clause("deadline", "when", "monday", single=True, replaces=True, previous="friday"),
        ),
        (
            "User's editor is no longer vim.",
            Clause("user editor", "be", "vim", single=True, negated=True),
        ),
        (
            "For project CloudRetail, the backend is FastAPI on AlloyDB.",
            Clause("backend", "be", "fastapi on alloydb", single=True),
        ),
        (
            "User uses Neovim in session sess_2026_01.",
            Clause("user", "use", "neovim", single=False),
        ),
        ("Alice is a doctor.", Clause("alice", "is a", "doctor", single=False)),
    ],
)
def test_a_statement_reads_as_exactly_this_clause(text, clause):
    assert parse(text) == clause


@pytest.mark.parametrize(
    "text",
    [
        "It is Monday.",
        "User never uses tabs.",
        "User does not like Java.",
        "Is the deadline Friday?",
        "Alice lives in Paris. Bob lives in Rome.",
        "The user walks a dog every morning.",
    ],
)
def test_what_is_no_plain_statement_of_a_value_reads_as_no_clause(text):
    assert parse(text) is None
