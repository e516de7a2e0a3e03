"""The user export's lines read back (shared.portability.records): each problem
named with its field, the line reader's limits, and the ids of a copy."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime

import pytest

from shared.portability.importing import copy_id, numbered_lines
from shared.portability.records import (
    MAX_LINE_BYTES,
    BadLine,
    Header,
    MemoryRecord,
    header_line,
    parse_header,
    parse_record,
)

TIME = "2026-01-01T00:00:00+00:00"
MEMORY = {
    "type": "memory",
    "id": "24bcbacf-4810-4056-bf19-fba32e21b3bb",
    "scope": "project",
    "kind": "fact",
    "project_id": "atlas",
    "session_id": None,
    "entity_name": "deploy",
    "text": "Atlas deploys on Fridays",
    "topic": "",
    "expire_at": None,
    "observed_at": TIME,
    "created_at": TIME,
    "updated_at": "2026-01-01T00:00:00",  # no offset: UTC
    "valid_from": TIME,
    "valid_to": None,
    "source_event_id": None,
    "embedding": [0.5, -0.25, 1e-07],
    "revisions": [
        {
            "action": "CREATED",
            "old_text": None,
            "new_text": "Atlas deploys on Fridays",
            "event_id": None,
            "observed_at": TIME,
            "applied": True,
            "created_at": TIME,
            "expire_at": None,
        }
    ],
}


FEEDBACK = {
    "rating": "wrong",
    "reason": "moved away",
    "source": "key:k1",
    "source_events": ["0b6f2b1e-54d1-4c4c-9a49-0e3cbbbd56a4"],
    "restored_at": None,
    "created_at": TIME,
}


def line(record: dict, **changes: object) -> bytes:
    return json.dumps({**record, **changes}).encode()


def test_a_memory_line_reads_back_whole():
    memory = parse_record(2, line(MEMORY), 3)
    assert isinstance(memory, MemoryRecord)
    assert (memory.project_id, memory.session_id) == ("atlas", "")
    assert memory.updated_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert memory.embedding == [0.5, -0.25, 1e-07]
    assert [r.action for r in memory.revisions] == ["CREATED"]
    assert memory.feedback == []  # absent from exports made before feedback
    rated = parse_record(2, line(MEMORY, feedback=[FEEDBACK]), 3)
    assert isinstance(rated, MemoryRecord)
    assert [(f.rating, f.reason, [str(e) for e in f.source_events]) for f in rated.feedback] == [
        ("wrong", "moved away", FEEDBACK["source_events"])
    ]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"scope": "global"}, "project_id: must be null for a global memory"),
        ({"scope": "session"}, "project_id: must be null for a session memory"),
        ({"project_id": None}, "project_id: a project memory needs one"),
        ({"embedding": [1.0, 2.0, 1e39]},
         "embedding: its number 2 (1e+39) is not a finite 32-bit float"),
        ({"observed_at": 1767225600}, "observed_at: Input should be a valid datetime"),
        ({"entity_name": "a\x00b"}, "entity_name: must not contain NUL characters"),
        ({"colour": "red"}, "colour: is not a known field"),
        ({"revisions": [{**MEMORY["revisions"][0], "applied": "yes"}]},
         "revisions[0].applied: Input should be a valid boolean"),
        ({"feedback": [{**FEEDBACK, "rating": "meh"}]},
         "feedback[0].rating: 'meh' is not one of 'useful', 'not_useful' or 'wrong'"),
        ({"feedback": [{**FEEDBACK, "source_events": ["x"]}]},
         "feedback[0].source_events[0]: Input should be a valid UUID, invalid character: "
         "found `x` at 0"),
    ],
)  # fmt: skip
def test_each_problem_is_named_by_its_field(changes, reason):
    assert parse_record(7, line(MEMORY, **changes), 3) == BadLine(7, reason)


def test_a_line_names_three_problems_and_counts_the_rest():
    problems = parse_record(4, b'{"type": "episode"}', 3)
    assert problems == BadLine(
        4, "id: is missing; project_id: is missing; session_id: is missing; and 10 more"
    )


def test_the_header_is_checked_before_anything_is_imported():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert isinstance(parse_header(1, header_line("acme", "u-42", now, 768), 768), Header)
    other = json.loads(header_line("acme", "u-42", now, 768))
    assert parse_header(1, line(other, version=2), 768) == BadLine(
        1, "version 2 is not one this code reads (1)"
    )
    assert parse_header(1, header_line("acme", "u-42", now, 384), 768) == BadLine(
        1,
        "the export's embeddings have 384 dimensions; this database's have 768 (AM_EMBEDDING_DIM)",
    )
    assert parse_header(1, line(other, user_id="a\x07b"), 768) == BadLine(
        1, "not an export's header line: user_id: must not contain control characters"
    )


def test_lines_are_numbered_and_an_over_long_one_is_skipped_unread():
    long = b"x" * (MAX_LINE_BYTES + 10)
    stream = io.BytesIO(b"first\r\n" + long + b"\n\nlast")
    assert list(numbered_lines(stream)) == [(1, b"first"), (2, None), (3, b""), (4, b"last")]


def test_a_copy_keeps_each_ids_place_in_the_order_and_nothing_else():
    originals = sorted(uuid.uuid4() for _ in range(200))
    copies = [copy_id(o, "acme", "u-43") for o in originals]
    assert copies == sorted(copies)  # searches break ties by id: the same order
    assert [c.bytes[:8] for c in copies] == [o.bytes[:8] for o in originals]
    assert not set(copies) & set(originals)
    assert copies == [copy_id(o, "acme", "u-43") for o in originals]  # the same every run
    assert not set(copies) & {copy_id(o, "acme", "u-44") for o in originals}
    assert {c.variant for c in copies} == {uuid.RFC_4122}
