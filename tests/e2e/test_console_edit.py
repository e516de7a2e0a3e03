"""The console's memory edit form and the user page's filter expression, in a real
browser (Debian's Chromium through playwright) against `agent-memory up`: every
field `PATCH /v1/memories/{id}` takes (topic and expiry among them), metadata
bounded in bytes as the API bounds it, and the list filtered as `GET
/v1/memories?filter=` filters it, a bad filter named as the API names it.

What the form did is read back through the API, not from the page alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from shared.memory.metadata import MAX_BYTES
from tests.console_support import Stack, launch_chromium, serve_stack, signed_in

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from serve_stack(tmp_path_factory.mktemp("console-edit") / "stack")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


def _memory_page(stack: Stack, browser: Browser, user: str, text: str) -> tuple[Page, str]:
    """A new memory of `user` (a global fact), its page open signed in; its id."""
    body = {"user_id": user, "kind": "fact", "scope": "global", "text": text}
    memory_id = stack.api("POST", "/v1/memories", json=body)["memory"]["id"]
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/user/memory?user={user}&id={memory_id}")
    return page, memory_id


def _stored(stack: Stack, user: str, memory_id: str) -> dict:
    return stack.api("GET", f"/v1/memories/{memory_id}", params={"user_id": user})


def _save(page: Page) -> int:
    """Submit the edit form; the HTTP status of the page it answers."""
    with page.expect_response(lambda r: r.url.endswith("/console/user/memory/edit")) as sent:
        page.click("#save-memory")
    return sent.value.status


def _metadata_of(size: int) -> dict[str, str]:
    """Metadata of exactly `size` bytes as compact JSON, mostly 3-byte characters
    (so about a third as many characters as bytes)."""
    frame = len('{"note":""}')
    euros, rest = divmod(size - frame, 3)
    value = {"note": "€" * euros + "a" * rest}
    assert len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()) == size
    return value


def test_the_edit_form_sets_the_topic_and_the_expiry_and_clears_them(
    stack: Stack, browser: Browser
) -> None:
    user = "u-edit-expiry"
    page, memory_id = _memory_page(stack, browser, user, "Drinks green tea.")
    first = _stored(stack, user, memory_id)
    assert first["expire_at"] is None and first["topic"] == ""
    # A topic and a time: the time is UTC, as the console shows every time.
    at = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    page.fill("#edit-topic", "drinks")
    page.fill("#edit-expire-at", at.strftime("%Y-%m-%dT%H:%M:%S"))
    assert _save(page) == 200
    expect(page.locator("#outcome")).to_have_text("saved as revision 2")
    expect(page.locator("#memory-topic")).to_have_text("drinks")
    expect(page.locator("#memory-expires")).to_have_text(at.strftime("%Y-%m-%d %H:%M:%S UTC"))
    stored = _stored(stack, user, memory_id)
    assert stored["topic"] == "drinks"
    assert datetime.fromisoformat(stored["expire_at"]) == at
    assert stored["text"] == "Drinks green tea."  # the fields left as they were stay
    # Seconds from now, as the API's ttl_seconds.
    before = datetime.now(UTC)
    page.fill("#edit-ttl", "3600")
    assert _save(page) == 200
    after = datetime.now(UTC)
    expect(page.locator("#outcome")).to_have_text("saved as revision 3")
    expires = datetime.fromisoformat(_stored(stack, user, memory_id)["expire_at"])
    assert before + timedelta(seconds=3600) <= expires <= after + timedelta(seconds=3600)
    # Two ways at once, or a time past, are refused, and change nothing.
    page.fill("#edit-expire-at", at.strftime("%Y-%m-%dT%H:%M:%S"))
    page.fill("#edit-ttl", "3600")
    assert _save(page) == 422
    expect(page.locator(".problem")).to_have_text(
        "ttl_seconds: give one of expire_at, ttl_seconds, never_expire, not two"
    )
    page.goto(f"{stack.url}/console/user/memory?user={user}&id={memory_id}")
    page.fill("#edit-expire-at", "2001-01-01T00:00:00")
    assert _save(page) == 422
    expect(page.locator(".problem")).to_have_text("expire_at: must be in the future")
    unchanged = _stored(stack, user, memory_id)
    assert len(unchanged["revisions"]) == 3
    assert datetime.fromisoformat(unchanged["expire_at"]) == expires
    # Never expire: the expiry is cleared; an empty topic clears the topic.
    page.goto(f"{stack.url}/console/user/memory?user={user}&id={memory_id}")
    page.check("#edit-never-expire")
    page.fill("#edit-topic", "")
    assert _save(page) == 200
    expect(page.locator("#outcome")).to_have_text("saved as revision 4")
    expect(page.locator("#memory-expires")).to_have_text("never")
    stored = _stored(stack, user, memory_id)
    assert stored["expire_at"] is None
    assert stored["topic"] == ""
    assert [r["action"] for r in stored["revisions"]] == ["CREATED", *["UPDATED"] * 3]
    page.context.close()


def test_metadata_is_bounded_in_bytes_as_the_api_bounds_it(stack: Stack, browser: Browser) -> None:
    user = "u-edit-metadata"
    page, memory_id = _memory_page(stack, browser, user, "Owns a bike.")
    at_limit, over = _metadata_of(MAX_BYTES), _metadata_of(MAX_BYTES + 1)
    typed = json.dumps(at_limit, ensure_ascii=False)
    assert len(typed) < MAX_BYTES // 2  # characters are not bytes
    page.fill("#edit-metadata", typed)
    assert _save(page) == 200
    expect(page.locator("#outcome")).to_have_text("saved as revision 2")
    assert _stored(stack, user, memory_id)["metadata"] == at_limit
    # The form shows it as typed, so saving it again sends it back unchanged.
    expect(page.locator("#edit-metadata")).to_have_value(typed)
    assert _save(page) == 200
    expect(page.locator("#outcome")).to_have_text("nothing changed")
    # The same bytes written as \u escapes: more characters than bytes.
    escaped = json.dumps(at_limit)
    assert len(escaped) > MAX_BYTES
    page.fill("#edit-metadata", escaped)
    assert _save(page) == 200
    expect(page.locator("#outcome")).to_have_text("nothing changed")
    # One byte more is refused with the API's own words, and nothing is written.
    page.fill("#edit-metadata", json.dumps(over, ensure_ascii=False))
    assert _save(page) == 422
    expect(page.locator(".problem")).to_have_text(
        f"metadata: is {MAX_BYTES + 1} bytes, over the limit of {MAX_BYTES} (as compact JSON)"
    )
    stored = _stored(stack, user, memory_id)
    assert stored["metadata"] == at_limit and len(stored["revisions"]) == 2
    page.context.close()


def test_the_users_memories_are_filtered_by_an_expression_and_a_bad_one_named(
    stack: Stack, browser: Browser
) -> None:
    user = "u-filter"
    for text, metadata in [
        ("Alice runs the infra on-call.", {"team": "infra", "level": 5}),
        ("Bob ships the web front end.", {"team": "web", "level": 2}),
        ("Carol joined infra this week.", {"team": "infra", "level": 1}),
        ("Dan has no team yet.", {}),
    ]:
        body = {"user_id": user, "kind": "fact", "scope": "global", "text": text}
        stack.api("POST", "/v1/memories", json={**body, "metadata": metadata, "consolidate": False})
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/user?id={user}")
    rows = page.locator("#memories tbody tr td:first-child")
    expect(rows).to_have_count(4)
    expression = '{"metadata.team": "infra", "metadata.level": {"gte": 1}}'
    page.fill("form.filters input[name=filter]", expression)
    page.click("form.filters button")
    listed = stack.api("GET", "/v1/memories", params={"user_id": user, "filter": expression})
    admitted = sorted(m["text"] for m in listed["memories"])
    assert admitted == ["Alice runs the infra on-call.", "Carol joined infra this week."]
    expect(rows).to_have_count(2)
    assert sorted(rows.all_inner_texts()) == admitted
    expect(page.locator("#memories-pager")).to_have_text("1–2 of 2 live memories")
    # The search box searches within the same filter, as memories:search does.
    page.fill("form.filters input[name=q]", "team")
    page.click("form.filters button")
    found = stack.api(
        "POST",
        "/v1/memories:search",
        json={"user_id": user, "query": "team", "k": 20, "filter": json.loads(expression)},
    )["memories"]
    assert found and {m["text"] for m in found} <= set(admitted)
    expect(page.locator("#search-results td a")).to_have_text([m["text"] for m in found])
    # A bad filter: the page names the part as the API's 422 does.
    for bad in ('{"and": [{"metadata.team": {"in": "infra"}}]}', "{kind"):
        answer = httpx.get(
            f"{stack.url}/v1/memories",
            params={"user_id": user, "filter": bad},
            headers={"Authorization": f"Bearer {stack.key}"},
        )
        assert answer.status_code == 422, answer.text
        page.fill("form.filters input[name=filter]", bad)
        with page.expect_response(lambda r: "/console/user?" in r.url) as shown:
            page.click("form.filters button")
        assert shown.value.status == 422
        expect(page.locator(".problem")).to_have_text(answer.json()["error"]["message"])
        page.goto(f"{stack.url}/console/user?id={user}")
    page.context.close()
