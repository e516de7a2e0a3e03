"""The console's lists page by page, with how many there are, in process against
the real stack: users, a user's memories and sessions, and a subscription's dead
letters, with pages of two rows (the page size is a setting of the console's
module, 50 in use) so that three rows make two pages. Their empty states say
what is empty. (The browser pages through users and memories in
tests/e2e/test_console.py.)"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from services.console import queries
from shared.bus.publisher import EventPublisher
from shared.db.episodes import Episode, Episodes
from shared.embeddings import HashEmbedder
from tests.bus_helpers import make_turn
from tests.dlq_helpers import dead_letter

SIZE = 2


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    monkeypatch.setattr(queries, "PAGE_SIZE", SIZE)


def _pager(page, id: str) -> str:
    found = re.search(rf'<p class="pager" id="{id}">(.*?)</p>', page.text, re.S)
    assert found, page.text
    return " ".join(re.sub(r"<[^>]+>", "", found[1]).split())


def _rows(page, section: str) -> list[str]:
    body = page.text.split(f'id="{section}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr><td><a href="[^"]+">([^<]+)</a>', body)


def _write(client, user: str, text: str, **extra) -> None:
    body = {"user_id": user, "kind": "fact", "scope": "global", "text": text, **extra}
    answer = client.post("/v1/memories", json={**body, "consolidate": False})
    assert answer.status_code == 201, answer.text


def test_users_page_by_page_with_their_count(client, ids):
    tag = uuid.uuid4().hex[:6]
    for n in range(3):
        _write(client, f"u-{tag}-{n}", f"Fact {n}.")
    first = client.get("/console/users", params={"q": f"u-{tag}"})
    assert _pager(first, "users-pager") == "1–2 of 3 users · Next 2"
    assert _rows(first, "users") == [f"u-{tag}-2", f"u-{tag}-1"]  # the latest seen first
    assert f'href="/console/users?q=u-{tag}&amp;page=2" rel="next"' in first.text
    second = client.get("/console/users", params={"q": f"u-{tag}", "page": "2"})
    assert _pager(second, "users-pager") == "3–3 of 3 users · Previous 2"
    assert _rows(second, "users") == [f"u-{tag}-0"]
    past = client.get("/console/users", params={"q": f"u-{tag}", "page": "3"})
    assert "Page 3 is past the last page (2)." in past.text
    none = client.get("/console/users", params={"q": f"nobody-{tag}"})
    assert f"has an id starting with “nobody-{tag}”." in none.text
    assert 'class="pager"' not in none.text


def test_a_user_s_memories_and_sessions_page_by_page(client, pool, ids):
    user = ids["user_id"]
    for n in range(3):
        _write(client, user, f"Fact number {n}.")
    _write(client, user, "Builds with gcc.", scope="project", project_id="heron")
    embedder = HashEmbedder(768)
    with pool.connection() as conn:
        for n in range(3):
            episode = Episode(
                app=ids["app"],
                user_id=user,
                project_id="",
                session_id=f"s-{n}",
                turn_id="t0",
                event_id=str(uuid.uuid4()),
                user_text=f"Hello from session {n}.",
                assistant_text="Hi.",
                tool_events=[],
                created_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=n),
            )
            Episodes(conn).archive_locally(episode, embedder.embed, neighbours=2, dated=True)
    page = client.get("/console/user", params={"id": user})
    assert _pager(page, "memories-pager") == "1–2 of 4 live memories · Next 2"
    assert _pager(page, "sessions-pager") == "1–2 of 3 archived sessions · Next 2"
    assert _rows(page, "sessions") == ["s-2", "s-1"]
    # The next page of one list keeps the other list's page and the filters.
    memories = client.get("/console/user", params={"id": user, "page": "2", "sessions": "2"})
    assert _pager(memories, "memories-pager") == "3–4 of 4 live memories · Previous 2"
    assert _pager(memories, "sessions-pager") == "3–3 of 3 archived sessions · Previous 2"
    assert "<h3>project heron</h3>" in memories.text  # global ones first, then projects
    assert _rows(memories, "sessions") == ["s-0"]
    filtered = client.get("/console/user", params={"id": user, "project": "heron"})
    assert _pager(filtered, "memories-pager") == "1–1 of 1 live memory"
    entity = client.get("/console/user", params={"id": user, "entity": "nothing-like-it"})
    assert f"No live memory of {user} matches these filters." in entity.text


def test_a_subscription_s_dead_letters_page_by_page(client, app_settings, ids):
    publisher = EventPublisher(app_settings)
    try:
        events = [make_turn(ids, n) for n in range(3)]
        dead_letter(publisher, "turns-summary", events, reason="why not")
    finally:
        publisher.stop()
    first = client.get("/console/dead-letters", params={"subscription": "turns-summary"})
    assert first.status_code == 200, first.text
    assert _pager(first, "letters-pager") == (
        "1–2 of 3 dead letters of turns-summary, the oldest first · Next 2"
    )
    second = client.get(
        "/console/dead-letters", params={"subscription": "turns-summary", "page": "2"}
    )
    assert _pager(second, "letters-pager").startswith("3–3 of 3 dead letters")
    shown = re.findall(r'name="event_id" value="([^"]+)"', first.text + second.text)
    assert sorted(shown) == sorted(e.event_id for e in events)
    empty = client.get("/console/dead-letters", params={"subscription": "compaction-requests"})
    assert "compaction-requests has no dead letter" in empty.text
