"""The operator's console in a real browser (Debian's Chromium through playwright)
against `agent-memory up`: sign-in, the overview's backlog, dead letters with
replay and purge, a user's memory, an event's trail, permissions, and what must
be refused (a form without its CSRF token, a tenant key on another app's user or
on the dead letters, a memory's text that is markup).

Screenshots of every page go to $AM_CONSOLE_SCREENSHOTS when it is set (that is
how docs/console/ is made), else to the test's temporary folder.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, expect

from services.console.access import KEY_COOKIE, SECURE_KEY_COOKIE
from tests.console_support import (
    NARROW,
    OtherSite,
    Stack,
    launch_chromium,
    reload_until,
    serve_stack,
    shoot,
    signed_in,
)
from tests.support import wait_for

pytestmark = pytest.mark.slow
WAIT_MS = 30_000
DRAIN_MS = 150_000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from serve_stack(tmp_path_factory.mktemp("console") / "stack")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("AM_CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_sign_in_keeps_the_key_in_an_httponly_cookie_and_sign_out_clears_it(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    # A deep link, opened signed out, comes back with its query after the sign-in.
    page.goto(f"{stack.url}/console/users?q=u-")
    expect(page).to_have_url(f"{stack.url}/console/sign-in?next=/console/users%3Fq%3Du-")
    shoot(page, shots, "sign-in")
    page.fill("#key", "am_not-a-key")
    page.click("form[action='/console/sign-in'] button")
    expect(page.get_by_role("alert")).to_have_text("key: invalid or revoked API key")
    page.fill("#key", stack.key)
    page.click("form[action='/console/sign-in'] button")
    expect(page).to_have_url(f"{stack.url}/console/users?q=u-")
    expect(page.locator("#q")).to_have_value("u-")
    assert stack.key not in page.url
    # Over plain HTTP: the console's paths only, no script, no other site's request.
    cookies = [
        (c["name"], c["value"], c["path"], c["httpOnly"], c["sameSite"], c["secure"])
        for c in context.cookies()
    ]
    assert cookies == [(KEY_COOKIE, stack.key, "/console", True, "Strict", False)]
    # No line the API logged holds the key (the banner of `up` prints it once).
    logged = [line for line in stack.up.output().splitlines() if line.startswith("{")]
    assert logged and not [line for line in logged if stack.key in line]
    page.click("text=Sign out")
    expect(page).to_have_url(f"{stack.url}/console/sign-in")
    assert context.cookies() == []
    page.goto(f"{stack.url}/console")
    expect(page).to_have_url(re.compile(r".*/console/sign-in\?next=/console$"))
    context.close()


def test_over_https_the_key_cookie_is_the_host_s_secure_one_that_no_page_can_toss(
    stack: Stack, browser: Browser
) -> None:
    # As behind a proxy that ends TLS: uvicorn trusts the forwarded scheme from
    # 127.0.0.1 (its FORWARDED_ALLOW_IPS), so the console answers as over HTTPS.
    context = browser.new_context(extra_http_headers={"X-Forwarded-Proto": "https"})
    page = context.new_page()
    page.goto(f"{stack.url}/console/permissions?user=u-https")
    page.fill("#key", stack.key)
    page.click("form[action='/console/sign-in'] button")
    expect(page).to_have_url(f"{stack.url}/console/permissions?user=u-https")
    cookies = [
        (c["name"], c["value"], c["path"], c["httpOnly"], c["sameSite"], c["secure"])
        for c in context.cookies()
    ]
    assert cookies == [(SECURE_KEY_COOKIE, stack.key, "/", True, "Strict", True)]
    page.fill("input[name=tool_name] >> nth=0", "shell")
    page.fill("input[name=pattern]", "rm -rf")
    page.click("button:text-is('Add')")
    expect(page.locator("#rules tbody tr")).to_have_count(1)
    # A page of another port tries to put its own key cookies beside the console's.
    tossing = (
        "<!doctype html><title>another site</title><script>"
        f"document.cookie = '{SECURE_KEY_COOKIE}=evil; Secure; path=/';"
        f"document.cookie = '{KEY_COOKIE}=evil; path=/';"
        "document.title = 'tossed';</script>"
    )
    with OtherSite(tossing) as other:
        page.goto(other.url)
        expect(page).to_have_title("tossed")
    # Chromium keeps the console's HttpOnly __Host- cookie and takes no second one:
    # over HTTPS the console reads no other name, and goes on working.
    secure = [c for c in context.cookies() if c["name"] == SECURE_KEY_COOKIE]
    assert [c["value"] for c in secure] == [stack.key]
    page.goto(f"{stack.url}/console/permissions?user=u-https")
    expect(page.locator("#rules tbody tr")).to_have_count(1)
    page.click("#rules button:text('Delete')")
    expect(page.locator("#rules tbody")).to_contain_text("No rule")
    context.close()


def test_a_page_of_another_port_that_tosses_cookies_and_posts_the_forms_changes_nothing(
    stack: Stack, browser: Browser
) -> None:
    user = "u-tossed"
    first = {"user_id": user, "kind": "preference", "scope": "global", "entity_name": "tea"}
    stack.api("POST", "/v1/memories", json={**first, "text": "Prefers green tea."})
    changed = stack.api("POST", "/v1/memories", json={**first, "text": "Now prefers black tea."})
    assert changed["action"] == "UPDATED"
    memory_id = changed["memory"]["id"]
    rule = {"user_id": user, "project_id": "global", "tool_name": "shell", "action": "BLOCK"}
    rule_id = stack.api("POST", "/v1/permissions/rules", json={**rule, "pattern": "rm"})["id"]
    event_id = stack.publish_poison()
    page = signed_in(browser, stack)
    letters = f"{stack.url}/console/dead-letters?subscription=turns-extraction"
    held = page.locator(f"tr:has(a:text-is('{event_id}'))")
    reload_until(page, letters, held, "the poison event in turns-extraction's dead letters")
    forms = {
        "/console/permissions/rules": {**rule, "tool_name": "git", "pattern": "push"},
        f"/console/permissions/rules/{rule_id}/delete": {"user_id": user},
        "/console/user/memory/delete": {"user": user, "id": memory_id, "confirm": "yes"},
        "/console/user/memory/rollback": {"user": user, "id": memory_id, "revision": "1"},
        "/console/user/profile/rollback": {
            "user": user,
            "field": "name",
            "revision": "1",
            "confirm": "yes",
        },
        "/console/user/memory/edit": {"user": user, "id": memory_id, "text": "edited"},
        "/console/user/memory/feedback": {"user": user, "id": memory_id, "rating": "wrong"},
        "/console/dead-letters/turns-extraction/replay": {"event_id": event_id},
        "/console/dead-letters/turns-extraction/purge": {"event_id": event_id, "confirm": "yes"},
        "/console/sign-out": {},
    }
    # First the cookie the console used to trust, then its key cookie's names too:
    # refused as from another site (403), then as a cookie sent twice (400). (What
    # the pages said, Chromium keeps to itself: a console page is never framed.)
    rounds = [
        (["am_console_csrf=evil; path=/"], 403),
        (
            [
                "am_console_csrf=evil; path=/",
                f"{KEY_COOKIE}=evil; path=/",
                f"{SECURE_KEY_COOKIE}=evil; Secure; path=/",
            ],
            400,
        ),
    ]
    for tossed, status in rounds:
        answered: dict[str, int] = {}

        def note(response, answered=answered) -> None:
            if response.request.method == "POST" and response.url.startswith(stack.url):
                answered[urlsplit(response.url).path] = response.status

        page.on("response", note)
        with OtherSite(_attack(stack.url, tossed, forms)) as other:
            page.goto(other.url)
            wait_for(
                lambda answered=answered: page.evaluate("1") and len(answered) == len(forms),
                30,
                "the console's answers to every form the other page posted",
            )
        page.remove_listener("response", note)
        assert answered == dict.fromkeys(forms, status)
        if status == 403:  # not signed out either
            page.goto(f"{stack.url}/console")
            expect(page.locator("h1")).to_have_text("Overview")
    # The second round left two key cookies: the console refuses to guess which is
    # its own, and says so; its own cookie is still there.
    page.goto(f"{stack.url}/console")
    expect(page.get_by_role("alert")).to_contain_text(f"the cookie {KEY_COOKIE} came 2 times")
    assert stack.key in [c["value"] for c in page.context.cookies() if c["name"] == KEY_COOKIE]
    page.context.close()
    # Nothing changed: the rule, the memory and its revisions, the dead letter.
    rules = stack.api("GET", "/v1/permissions/rules", params={"user_id": user})["rules"]
    assert [(r["id"], r["pattern"]) for r in rules] == [(rule_id, "rm")]
    memory = stack.api("GET", f"/v1/memories/{memory_id}", params={"user_id": user})
    assert (memory["text"], memory["deleted_at"], len(memory["revisions"])) == (
        "Now prefers black tea.",
        None,
        2,
    )
    clean = signed_in(browser, stack)
    clean.goto(letters)
    expect(clean.locator(f"tr:has(a:text-is('{event_id}'))")).to_have_count(1)
    clean.context.close()
    # Gone on purpose, so the next test's replay finds only its own letter.
    stack.cli("dlq", "purge", "turns-extraction", "--event-id", event_id, "--yes")


def _attack(console: str, cookies: list[str], forms: dict[str, dict[str, str]]) -> str:
    """Another site's page: it sets `cookies` for the whole host, then posts each of
    the console's `forms` (with a made-up CSRF token) into a frame of its own."""
    parts = ["<!doctype html><title>another site</title><script>"]
    parts += [f"document.cookie = {json.dumps(cookie)};" for cookie in cookies]
    parts.append("</script>")
    for n, (path, fields) in enumerate(forms.items()):
        inputs = "".join(
            f'<input name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in {**fields, "csrf": "evil"}.items()
        )
        parts.append(
            f'<iframe name="f{n}"></iframe>'
            f'<form method="post" target="f{n}" action="{console}{path}">{inputs}</form>'
        )
    parts.append("<script>for (const form of document.forms) form.submit();</script>")
    return "".join(parts)


def test_a_post_without_its_csrf_token_is_refused(stack: Stack, browser: Browser) -> None:
    page = signed_in(browser, stack)
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    form = {"user_id": "u-csrf", "tool_name": "shell", "pattern": ".*", "action": "BLOCK"}
    for sent in ({}, {"csrf": "forged"}):
        answer = httpx.post(
            f"{stack.url}/console/permissions/rules",
            data={**form, **sent},
            cookies=cookies,
            timeout=10,
        )
        assert answer.status_code == 403, answer.text
        assert "CSRF" in answer.text
    assert stack.api("GET", "/v1/permissions/rules", params={"user_id": "u-csrf"}) == {"rules": []}
    page.context.close()


def test_the_overview_shows_a_backlog_grow_and_drain_without_a_reload(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    page = signed_in(browser, stack)
    errors: list[str] = []  # what the browser refused or could not load (CSP, a 404)
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.reload()
    backlog = page.locator("tr[data-subscription='turns-extraction'] td.backlog")
    charted = page.locator("#chart-backlog g[data-subscription='turns-extraction']")
    # The poison events other tests published straight to Pub/Sub (a script, no
    # count of its own) were counted when a worker received them, then settled.
    expect(backlog).to_have_text("0", timeout=WAIT_MS)
    expect(page.locator("#replicas tr[data-kind='extraction'] td.ok")).to_have_text("ready")
    marker = page.evaluate("window.stillTheSamePage = true")  # gone if the page reloads
    assert marker is True
    stack.pause("extraction")
    try:
        for n in range(12):
            body = {"user_id": "u-backlog", "user": f"Step {n} of the plan.", "assistant": "Ok."}
            stack.api("POST", "/v1/sessions/s-backlog/turns", json=body)
        expect(backlog).to_have_text("12", timeout=WAIT_MS)
        silent = page.locator("#replicas tr[data-kind='extraction'] td.bad")
        expect(silent).to_have_text("silent", timeout=WAIT_MS)
        # The chart of the last hour takes it in at its next sample.
        expect(charted).to_have_attribute("data-highest", "12", timeout=WAIT_MS)
        expect(charted.locator("title")).to_have_text(
            "turns-extraction: now 12 messages, at most 12 messages in the last hour"
        )
        shoot(page, shots, "overview")
    finally:
        stack.pause("extraction", resume=True)
    # What the stopped replica had pulled comes back once its ack deadline passes.
    expect(backlog).to_have_text("0", timeout=DRAIN_MS)
    expect(charted).to_have_attribute("data-latest", "0", timeout=WAIT_MS)
    expect(charted).to_have_attribute("data-highest", "12")
    assert page.evaluate("window.stillTheSamePage") is True
    assert errors == []


def test_a_poison_event_is_replayed_by_click_then_purged_after_confirming(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    event_id = stack.publish_poison()
    page = signed_in(browser, stack)
    row = page.locator(f"tr:has(a:text-is('{event_id}'))")
    letters = f"{stack.url}/console/dead-letters?subscription=turns-extraction"
    reload_until(page, letters, row, "the poison event in turns-extraction's dead letters")
    expect(row).to_contain_text("turn.recorded.v1")
    expect(row).to_contain_text("default")
    shoot(page, shots, "dead-letters")
    row.locator("input[type=checkbox]").check()
    page.click("#replay")
    expect(page.locator("#outcome")).to_have_text("replayed 1, skipped 0, failed 0")
    # Still poison: it comes back to the same dead letters, then goes for good.
    reload_until(page, letters, row, "the replayed poison event dead-lettered again")
    row.locator("input[type=checkbox]").check()
    page.click("#purge")
    expect(page.locator("h1")).to_have_text("Purge 1 dead letter of turns-extraction?")
    shoot(page, shots, "purge-confirm")
    page.click("#confirm-purge")
    expect(page.locator("#outcome")).to_have_text("purged 1")
    expect(row).to_have_count(0)
    # The summary worker's copy is still there, untouched by both actions, and the
    # event's trail says where it is and why, with its replay button.
    page.goto(f"{stack.url}/console/dead-letters?subscription=turns-summary")
    expect(row).to_have_count(1)
    page.goto(f"{stack.url}/console/events?id={event_id}")
    held = page.locator("#dead-lettered form")
    expect(held).to_have_count(1)
    expect(held).to_contain_text("in turns-summary: user_id: must not contain control characters")
    expect(held.locator("button")).to_have_text("Replay for turns-summary")
    expect(page.locator("#archive-row")).to_contain_text("Not in the archive.")


def test_a_users_memory_found_by_search_its_revisions_then_deleted(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    user, probe = "u-memory", "<script>alert(1)</script>"
    first = {"user_id": user, "kind": "preference", "scope": "global", "entity_name": "editor"}
    stack.api("POST", "/v1/memories", json={**first, "text": f"{probe} prefers the vim editor"})
    changed = stack.api(
        "POST", "/v1/memories", json={**first, "text": f"{probe} now prefers the helix editor"}
    )
    assert changed["action"] == "UPDATED"
    memory_id = changed["memory"]["id"]
    stack.api(
        "POST",
        "/v1/memories",
        json={
            "user_id": user,
            "kind": "fact",
            "scope": "project",
            "project_id": "heron",
            "entity_name": "build",
            "text": "The Heron build uses gcc 14.",
        },
    )
    turn = stack.api(
        "POST",
        "/v1/sessions/s-memory/turns",
        json={
            "user_id": user,
            "user": "Remind me: the Heron release is on Friday.",
            "assistant": "Noted.",
        },
    )
    page = signed_in(browser, stack)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.click("header >> text=Users")
    page.fill("#q", "u-mem")
    page.click("text=Find")
    page.click(f"a:text-is('{user}')")
    expect(page.locator("#memories h3")).to_have_text(["global", "project heron"])
    reload_until(page, page.url, page.locator("#sessions a:text-is('s-memory')"), "the session")
    shoot(page, shots, "user")
    page.fill("form.filters input[name=q]", "helix editor")
    page.click("form.filters button")
    hit = page.locator("#search-results td a").first
    expect(hit).to_have_text(f"{probe} now prefers the helix editor")  # text, not markup
    # The score is the ranking's own number, as the API answers it (not rounded to 0).
    ranked = stack.api(
        "POST", "/v1/memories:search", json={"user_id": user, "query": "helix editor", "k": 20}
    )["memories"]
    expect(page.locator("#search-results td.score")).to_have_text(
        [str(found["score"]) for found in ranked]
    )
    page.fill("#archive input[name=archive]", "Heron release")
    page.click("#archive button")
    expect(page.locator("#archive .hit").first).to_contain_text("the Heron release is on Friday")
    shoot(page, shots, "user-search")
    page.locator("#search-results td a").first.click()
    expect(page).to_have_url(re.compile(f"/console/user/memory\\?user={user}&id={memory_id}$"))
    actions = page.locator("#revisions tbody tr td:nth-child(3)")
    expect(actions).to_have_text(["CREATED", "UPDATED"])
    # Back to the first text, as a third revision; then forward again.
    page.locator("#revisions tbody tr").nth(0).locator("button.rollback").click()
    expect(page.locator("#outcome")).to_have_text(
        "revision 1's text is current again, as revision 3"
    )
    expect(page.locator("#memory-text")).to_have_text(f"{probe} prefers the vim editor")
    expect(actions).to_have_text(["CREATED", "UPDATED", "UPDATED"])
    shoot(page, shots, "memory")
    page.locator("#revisions tbody tr").nth(1).locator("button.rollback").click()
    expect(page.locator("#memory-text")).to_have_text(f"{probe} now prefers the helix editor")
    expect(page.locator("#memory-id")).to_have_text(memory_id)
    # Edited in the form: a fifth revision, made by the signed-in key.
    page.fill("#edit-text", f"{probe} prefers the zed editor")
    page.select_option("#edit-kind", "fact")
    page.fill("#edit-metadata", '{"reviewed": true}')
    page.click("#save-memory")
    expect(page.locator("#outcome")).to_have_text("saved as revision 5")
    expect(page.locator("#memory-text")).to_have_text(f"{probe} prefers the zed editor")
    expect(page.locator("#memory-metadata")).to_have_text('{"reviewed": true}')
    expect(page.locator("#revisions tbody tr").nth(4).locator("td.source")).to_have_text(
        re.compile("^key:[0-9a-f-]{36}$")
    )
    page.click("#save-memory")
    expect(page.locator("#outcome")).to_have_text("nothing changed")
    page.fill("#edit-metadata", "[1]")
    page.click("#save-memory")
    expect(page.locator("main")).to_contain_text("metadata: must be a JSON object")
    page.goto(f"{stack.url}/console/user/memory?user={user}&id={memory_id}")
    page.click("#delete-memory")
    expect(page.locator("h1")).to_have_text(f"Delete this memory of {user}?")
    shoot(page, shots, "memory-delete")
    page.click("#confirm-delete")
    expect(page.locator("#memory-state")).to_contain_text("deleted")
    expect(actions).to_have_text(["CREATED", "UPDATED", "UPDATED", "UPDATED", "UPDATED", "DELETED"])
    listed = stack.api("GET", "/v1/memories", params={"user_id": user, "kind": "preference"})
    assert listed["memories"] == []
    # The session's buffered turns and its trail: the archive row and the consumer.
    page.goto(f"{stack.url}/console/user/session?user={user}&id=s-memory")
    expect(page.locator("article.turn")).to_contain_text("the Heron release is on Friday")
    shoot(page, shots, "session")
    assert dialogs == []
    page.context.close()
    _trail(stack, browser, shots, turn["event_id"])


def test_feedback_on_a_memory_is_given_shown_and_a_wrong_one_rolled_back(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    user = "u-feedback"
    body = {"user_id": user, "kind": "fact", "scope": "global", "entity_name": "car"}
    written = stack.api("POST", "/v1/memories", json={**body, "text": "Drives a red <b>van</b>."})
    memory_id = written["memory"]["id"]
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/user/memory?user={user}&id={memory_id}")
    expect(page.locator("#feedback tbody")).to_have_text("No feedback yet.")
    page.select_option("#feedback-rating", "useful")
    page.fill("#feedback-reason", "<i>booked</i> the van")
    page.click("#send-feedback")
    expect(page.locator("#outcome")).to_have_text("recorded as useful")
    rows = page.locator("#feedback tbody tr")
    expect(rows.locator("td.rating")).to_have_text(["useful"])
    expect(rows.locator("td:nth-child(3)")).to_have_text(["<i>booked</i> the van"])
    expect(rows.locator("td.source")).to_have_text([re.compile("^key:[0-9a-f-]{36}$")])
    page.select_option("#feedback-rating", "wrong")
    page.click("#send-feedback")
    expect(page.locator("#outcome")).to_have_text(
        "recorded as wrong: the memory is retired (roll it back to bring it back)"
    )
    expect(page.locator("#memory-state")).to_contain_text("deleted")
    expect(rows.locator("td.rating")).to_have_text(["useful", "wrong"])
    expect(page.locator("#give-feedback")).to_have_count(0)
    actions = page.locator("#revisions tbody tr td:nth-child(3)")
    expect(actions).to_have_text(["CREATED", "DELETED"])
    shoot(page, shots, "memory-feedback")
    page.locator("#revisions tbody tr").nth(0).locator("button.rollback").click()
    expect(page.locator("#memory-state")).to_have_text("live")
    expect(actions).to_have_text(["CREATED", "DELETED", "UPDATED"])
    expect(rows.nth(1).locator("td:nth-child(5)")).to_contain_text("restored")
    detail = stack.api("GET", f"/v1/memories/{memory_id}", params={"user_id": user})
    assert (detail["deleted_at"], detail["text"]) == (None, "Drives a red <b>van</b>.")
    page.context.close()


def _trail(stack: Stack, browser: Browser, shots: Path, event_id: str) -> None:
    page = signed_in(browser, stack)
    page.click("header >> text=Events")
    page.fill("#id", event_id)
    page.click("text=Show")
    expect(page.locator("#archive-row")).to_contain_text("the Heron release is on Friday")
    expect(page.locator("#consumers tbody td").first).to_have_text("turns-extraction")
    expect(page.locator("#dead-lettered")).to_have_text(re.compile("Not dead-lettered"))
    shoot(page, shots, "event")
    page.context.close()


def test_users_and_memories_page_by_page_with_their_counts(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    def write(user_and_text: tuple[str, str]) -> None:
        user, text = user_and_text
        body = {"user_id": user, "kind": "fact", "scope": "global", "text": text}
        stack.api("POST", "/v1/memories", json={**body, "consolidate": False})

    # 52 users (one of them with 51 memories): a page of 50 and a page of the rest.
    writes = [(f"u-many-{n:02d}", f"Fact {n} of many users.") for n in range(1, 52)]
    writes += [("u-many-00", f"Note {n} of one user.") for n in range(51)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, writes))
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/users?q=u-many-")
    expect(page.locator("#users-pager")).to_have_text("1–50 of 52 users · Next 50")
    expect(page.locator("#users tbody tr")).to_have_count(50)
    page.click("#users-pager a[rel=next]")
    expect(page).to_have_url(f"{stack.url}/console/users?q=u-many-&page=2")
    expect(page.locator("#users-pager")).to_have_text("51–52 of 52 users · Previous 50")
    expect(page.locator("#users tbody tr")).to_have_count(2)
    shoot(page, shots, "users")
    page.goto(f"{stack.url}/console/user?id=u-many-00")
    expect(page.locator("#memories-pager")).to_have_text("1–50 of 51 live memories · Next 50")
    page.click("#memories-pager a[rel=next]")
    expect(page.locator("#memories-pager")).to_have_text("51–51 of 51 live memories · Previous 50")
    expect(page.locator("#memories tbody tr")).to_have_count(1)
    expect(page.locator("#sessions .empty")).to_contain_text("u-many-00 has no archived session")
    page.context.close()


def test_permissions_rules_and_a_would_it_run_check(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    page = signed_in(browser, stack)
    page.click("header >> text=Permissions")
    page.fill("input[name=user]", "u-perm")
    page.click("text=Show rules")
    page.fill("input[name=tool_name] >> nth=0", "shell")
    page.fill("input[name=pattern]", "rm -rf")
    page.click("button:text-is('Add')")
    expect(page.locator("#rules tbody tr")).to_have_count(1)
    expect(page.locator("#rules code")).to_have_text("rm -rf")
    page.locator("input[name=tool_name]").nth(1).fill("shell")
    page.fill("textarea[name=tool_args]", '{"command": "rm -rf /"}')
    page.click("button:text-is('Evaluate')")
    expect(page.locator("#verdict")).to_contain_text("BLOCK")
    shoot(page, shots, "permissions")
    page.click("#rules button:text('Delete')")
    expect(page.locator("#rules tbody")).to_contain_text("No rule")
    page.context.close()


def test_a_tenant_key_sees_its_own_app_only(stack: Stack, browser: Browser, shots: Path) -> None:
    stack.api(
        "POST",
        "/v1/memories",
        json={
            "user_id": "u-default-only",
            "kind": "fact",
            "scope": "global",
            "text": "Only default's.",
        },
    )
    created = stack.cli("keys", "create", "--app", "other", "--name", "console test")
    key = re.search(r"am_[A-Za-z0-9_-]+", created)[0]
    page = signed_in(browser, stack, key)
    expect(page.locator("header .who")).to_contain_text("app other")
    expect(page.locator("header nav")).not_to_contain_text("Dead letters")
    expect(page.locator("main")).to_contain_text("they are shown to admin keys")
    for path, status in (
        ("/console/user?id=u-default-only", 404),
        ("/console/dead-letters", 403),
        ("/console/figures", 403),
    ):
        answer = page.goto(f"{stack.url}{path}")
        assert answer is not None and answer.status == status, path
    page.goto(f"{stack.url}/console/users?q=u-default")
    expect(page.locator("main .empty")).to_have_text(
        "No user of app other has an id starting with “u-default”."
    )
    answer = page.request.post(
        f"{stack.url}/console/dead-letters/turns-extraction/replay",
        form={"csrf": _csrf(page), "event_id": "00000000-0000-0000-0000-000000000000"},
    )
    assert answer.status == 403
    page.context.close()
    narrow = signed_in(browser, stack, viewport=NARROW)
    shoot(narrow, shots, "overview-narrow")
    width = narrow.evaluate("document.documentElement.scrollWidth")
    assert width <= NARROW["width"], width  # nothing runs off a phone's screen
    narrow.context.close()


def _csrf(page) -> str:
    """The token of the signed-in key's forms, as every console page carries it."""
    return page.locator("input[name=csrf]").first.get_attribute("value")


def test_an_entity_page_is_reached_from_a_memory_that_mentions_it(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    user = "u-entity"
    body = {"user_id": user, "kind": "fact", "scope": "global"}
    first = stack.api("POST", "/v1/memories", json={**body, "text": "Dana Lee works at Acme Corp."})
    stack.api("POST", "/v1/memories", json={**body, "text": "Dana plays the <b>cello</b>."})
    memory_id = first["memory"]["id"]
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/user/memory?user={user}&id={memory_id}")
    links = page.locator("#memory-entities a")
    expect(links).to_have_text(["Acme Corp", "Dana Lee"])
    # The fact the memory states, its subject and object links to their pages.
    stated = page.locator("#memory-facts tbody tr")
    expect(stated).to_have_count(1)
    expect(stated.locator("td")).to_have_text(
        ["Dana Lee", "employer", "Acme Corp", re.compile(r"\S"), "still true"]
    )
    expect(stated.locator("a")).to_have_text(["Dana Lee", "Acme Corp"])
    assert stated.locator("a").nth(0).get_attribute("href") == links.nth(1).get_attribute("href")
    links.nth(1).click()
    expect(page).to_have_url(re.compile(r"/console/user/entity\?user=u-entity&id="))
    expect(page.locator("#entity-name")).to_have_text("Dana Lee")
    expect(page.locator("#entity-kind")).to_have_text("person")
    expect(page.locator("#entity-aliases")).to_contain_text("Dana (first name)")
    rows = page.locator("#facts tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("employer")
    expect(rows.first).to_contain_text("Acme Corp")
    expect(rows.first).to_contain_text("still true")
    # Both memories, the markup as text; each leads back to its memory.
    expect(page.locator("#entity-memories li")).to_have_count(2)
    expect(page.locator("#entity-memories")).to_contain_text("Dana plays the <b>cello</b>.")
    shoot(page, shots, "entity")
    page.locator(f"#entity-memories a[href*='{memory_id}']").click()
    expect(page.locator("#memory-id")).to_have_text(memory_id)
    # Another user's entity is not found.
    entity_url = links.nth(1).get_attribute("href")
    assert entity_url is not None
    other = page.goto(f"{stack.url}{entity_url.replace('u-entity', 'u-other')}")
    assert other is not None and other.status == 404


def test_an_agents_memory_links_the_entity_as_that_agent_sees_it(
    stack: Stack, browser: Browser
) -> None:
    user = "u-entity-agents"
    body = {"user_id": user, "kind": "fact", "scope": "global"}
    planner = {**body, "text": "Mia Chen founded Globex.", "agent_id": "planner"}
    stack.api("POST", "/v1/memories", json=planner)
    coder = {**body, "text": "Mia likes sushi.", "agent_id": "coder"}
    memory_id = stack.api("POST", "/v1/memories", json=coder)["memory"]["id"]
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/user/memory?user={user}&id={memory_id}")
    # One entity for the user; the coder's memory calls it by the coder's word.
    link = page.locator("#memory-entities a")
    expect(link).to_have_text(["Mia"])
    link.click()
    expect(page).to_have_url(
        re.compile(r"/console/user/entity\?user=u-entity-agents&id=.*&agent=coder")
    )
    expect(page.locator("#entity-name")).to_have_text("Mia")
    expect(page.locator("#entity-aliases")).to_have_text("Mia (first name)")
    # Nothing of the planner's: not its memory, not the fact it states (Globex).
    expect(page.locator("#entity-memories li")).to_have_text([re.compile(r"^Mia likes sushi\.")])
    facts = page.locator("#facts tbody tr")
    expect(facts).to_have_count(1)
    expect(facts.locator("td")).to_have_text(
        ["Mia", "prefer", "sushi", re.compile(r"\S"), "still true"]
    )


def test_an_agents_memory_shows_its_agent_and_is_edited_as_that_agent(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    user = "u-agents"
    body = {"user_id": user, "kind": "preference", "scope": "global"}
    stack.api(
        "POST",
        "/v1/memories",
        json={**body, "text": "Prefers terse answers.", "agent_id": "planner"},
    )
    stack.api("POST", "/v1/memories", json={**body, "text": "Speaks Portuguese."})
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/user?id={user}")
    # The latest change first: the user's memory, then the planner's own.
    expect(page.locator("#memories td.agent")).to_have_text(["—", "planner"])
    page.fill("input[name=agent]", "planner")
    page.click("form.filters button")
    expect(page.locator("#memories td.agent")).to_have_text(["planner"])
    page.locator("#memories a", has_text="Prefers terse answers.").click()
    expect(page.locator("#memory-agent")).to_have_text("planner")
    page.fill("#edit-text", "Prefers short answers.")
    page.click("#save-memory")
    expect(page.locator("#outcome")).to_have_text("saved as revision 2")
    expect(page.locator("#memory-agent")).to_have_text("planner")
    shoot(page, shots, "memory-of-an-agent")
    # Opened without its agent in the link (as an entity's page links it): found all the same.
    memory_id = page.locator("#memory-id").inner_text()
    page.goto(f"{stack.url}/console/user/memory?user={user}&id={memory_id}")
    expect(page.locator("#memory-text")).to_have_text("Prefers short answers.")
    page.context.close()
    # A key limited to an agent reads every agent's memories nowhere: not here either.
    created = stack.cli("keys", "create", "--app", "default", "--agent", "planner")
    key = re.search(r"am_[A-Za-z0-9_-]+", created)[0]
    limited = signed_in(browser, stack, key)
    answer = limited.goto(f"{stack.url}/console/user?id={user}")
    assert answer is not None and answer.status == 403
    expect(limited.locator("main")).to_contain_text("not one limited to an agent")
    limited.context.close()


def test_a_users_profile_is_shown_and_saved_from_the_users_page(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    user = "u-profile"
    fields = [
        {"name": "name", "type": "string", "description": "what to call them"},
        {"name": "preferred_language", "type": "enum", "values": ["English", "French"]},
        {"name": "team_size", "type": "number"},
    ]
    stack.api("PUT", "/v1/config/profile", json={"fields": fields})
    body = {"user_id": user, "kind": "fact", "scope": "global", "text": "Works on Atlas."}
    stack.api("POST", "/v1/memories", json=body)
    stack.api("PATCH", f"/v1/users/{user}/profile", json={"values": {"name": "Ada"}})
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/user?id={user}")
    rows = page.locator("#profile tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#profile-name")).to_have_value("Ada")
    expect(rows.first).to_contain_text("key:")
    page.select_option("#profile-preferred_language", "French")
    page.fill("#profile-team_size", "12")
    page.fill("#profile-name", "")
    shoot(page, shots, "profile")
    page.click("#save-profile")
    expect(page).to_have_url(re.compile(r"/console/user\?id=u-profile#profile$"))
    expect(page.locator("#profile-preferred_language")).to_have_value("French")
    saved = stack.api("GET", f"/v1/users/{user}/profile")
    assert saved["values"] == {"preferred_language": "French", "team_size": 12}
    history = stack.api("GET", f"/v1/users/{user}/profile/revisions")["revisions"]
    assert [(r["field"], r["action"]) for r in history] == [
        ("name", "SET"),
        ("name", "CLEARED"),
        ("preferred_language", "SET"),
        ("team_size", "SET"),
    ]
    # A number that is none is refused with its field, and nothing is saved.
    page.fill("#profile-team_size", "a dozen")
    page.click("#save-profile")
    expect(page.locator("main")).to_contain_text("team_size: must be a number")
    assert stack.api("GET", f"/v1/users/{user}/profile")["values"]["team_size"] == 12


def test_a_profile_field_is_rolled_back_from_its_history_once_confirmed(
    stack: Stack, browser: Browser, shots: Path
) -> None:
    user = "u-profile-rollback"
    stack.api(
        "PUT", "/v1/config/profile", json={"fields": [{"name": "timezone", "type": "string"}]}
    )
    for timezone in ("Europe/Paris", "Asia/Tokyo"):
        stack.api("PATCH", f"/v1/users/{user}/profile", json={"values": {"timezone": timezone}})
    body = {"user_id": user, "kind": "fact", "scope": "global", "text": "Travels a lot."}
    stack.api("POST", "/v1/memories", json=body)
    page = signed_in(browser, stack)
    page.goto(f"{stack.url}/console/user?id={user}")
    rows = page.locator("#profile-history tbody tr")
    expect(rows.locator("td:nth-child(5)")).to_have_text(["Europe/Paris", "Asia/Tokyo"])
    # Only a value that is not the current one can come back.
    expect(rows.nth(1).locator("button.rollback")).to_have_count(0)
    rows.nth(0).locator("button.rollback").click()
    expect(page.locator("h1")).to_have_text(f"Roll timezone of {user} back to revision 1?")
    expect(page.locator("#value-now")).to_have_text("Asia/Tokyo")
    expect(page.locator("#value-back")).to_have_text("Europe/Paris")
    shoot(page, shots, "profile-rollback")
    # Asked, not done: the profile is as it was until the rollback is confirmed.
    assert stack.api("GET", f"/v1/users/{user}/profile")["values"] == {"timezone": "Asia/Tokyo"}
    page.click("#confirm-rollback")
    expect(page).to_have_url(re.compile(r"/console/user\?id=u-profile-rollback#profile-history$"))
    expect(page.locator("#profile-timezone")).to_have_value("Europe/Paris")
    expect(rows.locator("td:nth-child(2)")).to_have_text(["1", "2", "3"])
    expect(rows.nth(2).locator("td.source")).to_have_text(re.compile("^key:[0-9a-f-]{36}$"))
    expect(rows.nth(0).locator("button.rollback")).to_have_count(0)
    expect(rows.nth(1).locator("button.rollback")).to_have_count(1)
    history = stack.api("GET", f"/v1/users/{user}/profile/revisions")["revisions"]
    assert [(r["revision"], r["value"], r["previous"]) for r in history] == [
        (1, "Europe/Paris", None),
        (2, "Asia/Tokyo", "Europe/Paris"),
        (3, "Europe/Paris", "Asia/Tokyo"),
    ]
    # A revision the field does not have is refused on the console's error page.
    page.goto(f"{stack.url}/console/user?id={user}")
    page.evaluate("document.querySelector('#profile-history input[name=revision]').value = '9'")
    rows.nth(1).locator("button.rollback").click()
    expect(page.locator("main")).to_contain_text("revision: no revision 9 of field 'timezone'")
    page.context.close()
