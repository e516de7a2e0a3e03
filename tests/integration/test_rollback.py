"""Rolling a memory back through the Python client against the real API: revision
N's text is current again as a new revision, the history stays, and each refusal
is the status the API documents."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.client import MemoryClient
from shared.client.errors import ConflictError, InvalidRequestError, NotFoundError
from tests.support import serve_api


@pytest.fixture
def memory_client(app_settings, topology) -> Iterator[MemoryClient]:
    with serve_api(app_settings) as url, MemoryClient(url) as client:
        yield client


def _history(client: MemoryClient, user: str, memory_id: str) -> list[tuple[int, str, str | None]]:
    detail = client.get_memory(user, memory_id)
    return [(r.revision, r.action, r.new_text) for r in detail.revisions]


def test_a_rollback_makes_an_earlier_text_current_as_a_new_revision(memory_client, ids):
    user = ids["user_id"]
    write = {"scope": "global", "kind": "preference", "entity_name": "editor"}
    first = memory_client.write_memory(user, "Prefers vim.", **write).memory
    memory_client.write_memory(user, "Prefers helix.", **write)
    rolled = memory_client.rollback_memory(user, first.id, 1)
    assert rolled.text == "Prefers vim."
    assert [(r.revision, r.action, r.old_text, r.new_text) for r in rolled.revisions] == [
        (1, "CREATED", None, "Prefers vim."),
        (2, "UPDATED", "Prefers vim.", "Prefers helix."),
        (3, "UPDATED", "Prefers helix.", "Prefers vim."),
    ]
    # The search finds the text it holds now, and the rollback can itself be undone.
    found = memory_client.search(user, "vim editor")
    assert [m.text for m in found] == ["Prefers vim."]
    assert memory_client.rollback_memory(user, first.id, 2).text == "Prefers helix."
    assert _history(memory_client, user, first.id)[-1] == (4, "UPDATED", "Prefers helix.")


def test_each_rollback_that_cannot_be_done_is_refused_and_changes_nothing(memory_client, ids):
    user = ids["user_id"]
    write = {"scope": "global", "kind": "fact", "entity_name": "build"}
    memory = memory_client.write_memory(user, "Heron uses gcc 12.", **write).memory
    memory_client.write_memory(user, "Heron uses gcc 14.", **write)
    before = _history(memory_client, user, memory.id)
    with pytest.raises(InvalidRequestError, match="revision: no revision 3: this memory has"):
        memory_client.rollback_memory(user, memory.id, 3)
    with pytest.raises(ConflictError, match="revision 2's text is already current"):
        memory_client.rollback_memory(user, memory.id, 2)
    with pytest.raises(NotFoundError):
        memory_client.rollback_memory(user, "7a1b3c4d-0000-4000-8000-000000000000", 1)
    with pytest.raises(NotFoundError):
        memory_client.rollback_memory("someone-else", memory.id, 1)
    assert _history(memory_client, user, memory.id) == before
    memory_client.delete_memory(user, memory.id)
    with pytest.raises(ConflictError, match="the memory is deleted"):
        memory_client.rollback_memory(user, memory.id, 1)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"revision": 0}, "revision"),
        ({"revision": 1.5}, "revision"),
        ({"revision": True}, "revision"),
        ({}, "revision"),
        ({"revision": 1, "extra": 1}, "extra"),
    ],
)
def test_a_bad_rollback_body_is_a_422_naming_the_field(client, ids, body, field):
    written = client.post(
        "/v1/memories",
        json={"user_id": ids["user_id"], "kind": "fact", "scope": "global", "text": "A fact."},
    )
    memory_id = written.json()["memory"]["id"]
    answer = client.post(
        f"/v1/memories/{memory_id}:rollback", json={"user_id": ids["user_id"], **body}
    )
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]
