"""The console's answers to bad input, in process against the real stack (the
browser test, tests/e2e/test_console.py, drives the pages themselves). The test
settings disable authentication: every console request is the test app's, as an
admin key's would be.

Every form field and query parameter of every page gets an over-long value, a NUL,
invalid UTF-8 and no value at all: each answer is a page in the console's style
(never the API's JSON, never a 5xx), and a value the page cannot take is a 422
naming its field."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.console.access import CSP
from shared.bus.admin import TopologyAdmin
from tests.conftest import make_settings

STYLE = '<link rel="stylesheet" href="/console/static/console.css">'
LONG = "x" * 70_000  # in a posted form, as the attack that found the 500s sent them
LONG_QUERY = "x" * 60_000  # a URL holds at most 64 KiB in the test's client
MEMORY_ID = "00000000-0000-4000-8000-000000000001"


@dataclass(frozen=True)
class Known:
    """What the module's app holds: a user with a memory, a session and a rule."""

    user: str
    memory_id: str
    rule_id: str


@pytest.fixture(scope="module")
def console(stack) -> Iterator[tuple[TestClient, Known]]:
    tag = uuid.uuid4().hex[:8]
    settings = make_settings(stack, default_app=f"app-{tag}")
    TopologyAdmin(settings).apply()
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        user = f"u-{tag}"
        written = client.post(
            "/v1/memories",
            json={"user_id": user, "kind": "fact", "scope": "global", "text": "Likes tea."},
        )
        assert written.status_code == 201, written.text
        turn = {"user_id": user, "user": "Hello.", "assistant": "Hi."}
        assert client.post("/v1/sessions/s-1/turns", json=turn).status_code == 202
        rule = client.post(
            "/v1/permissions/rules",
            json={
                "user_id": user,
                "project_id": "global",
                "tool_name": "shell",
                "pattern": "rm",
                "action": "BLOCK",
            },
        )
        assert rule.status_code == 201, rule.text
        yield client, Known(user, written.json()["memory"]["id"], rule.json()["id"])


def _token(client: TestClient) -> str:
    page = client.get("/console/permissions")
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf" value="([^"]+)"', page.text)[1]


def _looks_like_the_console(answer) -> None:
    assert answer.status_code < 500, answer.text[:500]
    if answer.status_code in (302, 303):
        assert answer.headers["location"].startswith("/console"), answer.headers
        return
    assert answer.headers["content-type"].startswith("text/html"), answer.text[:300]
    assert answer.headers["content-security-policy"] == CSP
    assert STYLE in answer.text, answer.text[:300]


# Every page and form: its path (with `{rule}` for a rule's id), method, and a
# request that works (`{user}`, `{memory}` stand for the module's own), then the
# fields whose value it needs and those that may be missing.
@dataclass(frozen=True)
class Form:
    method: str
    path: str
    good: dict[str, str]
    required: tuple[str, ...]

    def fields(self) -> list[str]:
        return list(self.good)


FORMS = [
    Form("GET", "/console/users", {"q": "u-", "page": "1"}, ()),
    Form(
        "GET",
        "/console/user",
        {
            "id": "{user}",
            "kind": "fact",
            "entity": "x",
            "project": "p",
            "q": "tea",
            "archive": "hello",
            "filter": '{"metadata.by": {"exists": false}}',
            "page": "1",
            "sessions": "1",
        },
        ("id",),
    ),
    Form("GET", "/console/user/memory", {"user": "{user}", "id": "{memory}"}, ("user", "id")),
    Form("GET", "/console/user/session", {"user": "{user}", "id": "s-1"}, ("user", "id")),
    Form(
        "GET",
        "/console/user/entity",
        {"user": "{user}", "id": MEMORY_ID, "project": "p"},
        ("user", "id"),
    ),
    Form("GET", "/console/events", {"id": MEMORY_ID}, ()),
    Form("GET", "/console/dead-letters", {"subscription": "turns-summary", "page": "1"}, ()),
    Form("GET", "/console/permissions", {"user": "{user}", "project": "p"}, ()),
    Form("GET", "/console/sign-in", {"next": "/console/users"}, ()),
    Form("POST", "/console/sign-in", {"key": "am_some-key", "next": "/console"}, ("key",)),
    Form(
        "POST",
        "/console/user/memory/rollback",
        {"user": "{user}", "id": "{memory}", "revision": "1"},
        ("user", "id", "revision"),
    ),
    Form(
        "POST",
        "/console/user/memory/edit",
        {
            "user": "{user}",
            "id": "{memory}",
            "text": "Likes green tea.",
            "kind": "fact",
            "entity_name": "tea",
            "topic": "drinks",
            "metadata": '{"by": "console"}',
            "expire_at": "2999-01-01T00:00",
            "ttl_seconds": "",
            "never_expire": "",
        },
        ("user", "id", "text"),
    ),
    Form(
        "POST",
        "/console/user/memory/feedback",
        {"user": "{user}", "id": "{memory}", "rating": "useful", "reason": "it helped"},
        ("user", "id", "rating"),
    ),
    Form(
        "POST", "/console/user/memory/delete", {"user": "{user}", "id": "{memory}"}, ("user", "id")
    ),
    Form("POST", "/console/user/profile", {"user": "{user}"}, ("user",)),
    Form(
        "POST",
        "/console/user/profile/rollback",
        {"user": "{user}", "field": "name", "revision": "1"},
        ("user", "field", "revision"),
    ),
    Form(
        "POST",
        "/console/dead-letters/turns-summary/replay",
        {"event_id": MEMORY_ID},
        ("event_id",),
    ),
    Form(
        "POST",
        "/console/dead-letters/turns-summary/purge",
        {"event_id": MEMORY_ID, "confirm": "no"},
        ("event_id",),
    ),
    Form(
        "POST",
        "/console/permissions/rules",
        {
            "user_id": "{user}",
            "project_id": "p",
            "tool_name": "git",
            "pattern": "push",
            "action": "ALLOW",
        },
        ("user_id", "tool_name", "pattern", "action"),
    ),
    Form(
        "POST",
        "/console/permissions/rules/{rule}/delete",
        {"user_id": "{user}", "project_id": "p"},
        ("user_id",),
    ),
    Form(
        "POST",
        "/console/permissions/evaluate",
        {
            "user_id": "{user}",
            "project_id": "p",
            "session_id": "s-1",
            "tool_name": "shell",
            "tool_args": '{"command": "ls"}',
        },
        ("user_id", "tool_name"),
    ),
]
# Fields that take any value, and answer a page with it or without it.
FREE = {"next", "confirm"}
BAD = {"long": LONG, "nul": "a\x00b", "utf8": None, "missing": None}
CASES = [
    pytest.param(form, field, bad, id=f"{form.method} {form.path} {field} {bad}")
    for form in FORMS
    for field in form.fields()
    for bad in BAD
]


def _send(client: TestClient, known: Known, form: Form, field: str, bad: str, token: str):
    values = {
        k: v.replace("{user}", known.user).replace("{memory}", known.memory_id)
        for k, v in form.good.items()
    }
    path = form.path.replace("{rule}", known.rule_id)
    # Invalid UTF-8 is sent as bytes: %FF decodes to no character of any text.
    encoded = {k: quote(v) for k, v in values.items()}
    if bad == "missing":
        del encoded[field]
    elif bad == "utf8":
        encoded[field] = "%FF%FEa"
    elif bad == "long" and form.method == "GET":
        encoded[field] = LONG_QUERY
    else:
        encoded[field] = quote(BAD[bad])
    if form.method == "POST":
        encoded["csrf"] = quote(token)
    body = "&".join(f"{k}={v}" for k, v in encoded.items())
    if form.method == "GET":
        return client.get(f"{path}?{body}", follow_redirects=False)
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return client.post(path, content=body, headers=headers, follow_redirects=False)


@pytest.mark.parametrize(("form", "field", "bad"), CASES)
def test_every_field_s_bad_value_gets_a_console_page(console, form, field, bad):
    client, known = console
    answer = _send(client, known, form, field, bad, _token(client))
    _looks_like_the_console(answer)
    named = f"{field}: " if field != "key" else "key: enter an API key"
    if bad in ("long", "nul") and field not in FREE:
        assert answer.status_code in (401, 422), answer.text[:300]
        assert named in answer.text, answer.text[:1000]
    if bad == "missing" and field in form.required:
        assert answer.status_code in (401, 422), answer.text[:300]
        assert named in answer.text, answer.text[:1000]


def test_every_form_and_page_is_in_the_table_above(console):
    """A page or form added to the console is added to FORMS too."""
    client, _ = console
    routes = {
        (method, route.path)
        for route in client.app.routes
        if route.path.startswith("/console") and hasattr(route, "methods")
        for method in route.methods - {"HEAD"}
    }
    listed = {(form.method, form.path.replace("{rule}", "{rule_id}")) for form in FORMS}
    without_fields = {
        ("GET", "/console"),
        ("GET", "/console/figures"),
        ("POST", "/console/sign-out"),
    }
    listed = {
        (m, p.replace("/turns-summary/", "/{subscription}/")) for m, p in listed
    } | without_fields
    assert routes == listed


@pytest.mark.parametrize(
    ("path", "status", "problem"),
    [
        ("/console/users?q=%00", 422, "q: must not contain control characters"),
        ("/console/user?id=bad%07id", 422, "id: must not contain control characters"),
        ("/console/user?id=a&project=%00", 422, "project: must not contain control characters"),
        ("/console/user", 422, "id: is required"),
        ("/console/user?id=nobody-at-all", 404, "user_id: no user &#39;nobody-at-all&#39;"),
        (
            "/console/user?id={user}&filter=" + quote('{"or": [{"kind": {"like": "f"}}]}'),
            422,
            "filter.or[0].kind.like: ",
        ),
        ("/console/user?id={user}&filter=" + "%5B" * 5000, 422, "filter: nests too deep"),
        ("/console/user/memory?user=a&id=nope", 422, "id: a memory id is a UUID"),
        ("/console/events?id=not-an-id", 422, "id: an event id is a UUID"),
        ("/console/dead-letters?subscription=nope", 422, "subscription: must be one of"),
        ("/console/dead-letters?page=0", 422, "page: must be a whole number from 1"),
        ("/console/users?page=" + "9" * 5000, 422, "page: must be a whole number from 1"),
        ("/console/no-such-page", 404, "no such page"),
    ],
)
def test_bad_input_gets_a_page_naming_the_field(console, path, status, problem):
    client, known = console
    answer = client.get(path.replace("{user}", known.user))
    assert answer.status_code == status, answer.text
    assert problem in answer.text
    _looks_like_the_console(answer)


def test_a_method_a_page_does_not_take_is_a_page_too(console):
    client, _ = console
    answer = client.delete("/console/users")
    assert answer.status_code == 405
    _looks_like_the_console(answer)


def test_a_post_needs_the_csrf_token_of_its_key(console):
    client, _ = console
    token = _token(client)
    path = "/console/dead-letters/turns-summary/replay"
    assert client.post(path, data={"event_id": "x"}).status_code == 403
    assert client.post(path, data={"event_id": "x", "csrf": token + "x"}).status_code == 403
    ticked_none = client.post(path, data={"csrf": token})
    assert ticked_none.status_code == 422
    assert "event_id: tick at least one dead letter" in ticked_none.text


def test_sign_in_without_a_key_names_the_field(console):
    client, _ = console
    answer = client.post("/console/sign-in", data={"key": " "})
    assert answer.status_code == 401
    assert "key: enter an API key of your app" in answer.text
    assert "am_console_key" not in answer.headers.get("set-cookie", "")


def test_memories_and_turns_show_as_text_never_as_markup(console):
    client, _ = console
    probe = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    user = f"u-{uuid.uuid4().hex[:8]}"
    written = client.post(
        "/v1/memories", json={"user_id": user, "kind": "fact", "scope": "global", "text": probe}
    )
    assert written.status_code == 201, written.text
    page = client.get("/console/user", params={"id": user})
    assert page.status_code == 200, page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in (
        page.text
    )
    assert "<script>alert" not in page.text and "<img src=x" not in page.text


@pytest.mark.parametrize(
    "arguments",
    [
        "[" * 100_000,
        '{"a": 1e999}',
        '{"a": NaN}',
        '{"a": "\\ud800"}',
        '{"a": ' + "1" * 5000 + "}",
        "[1]",
    ],
)
def test_a_would_it_run_check_with_arguments_the_api_cannot_take_names_the_field(
    console, arguments
):
    client, known = console
    answer = client.post(
        "/console/permissions/evaluate",
        data={
            "csrf": _token(client),
            "user_id": known.user,
            "tool_name": "shell",
            "tool_args": arguments,
        },
    )
    assert answer.status_code == 422, answer.text
    assert "tool_args: " in answer.text


def test_a_user_id_that_is_not_a_path_segment_links_to_its_own_page(console):
    client, _ = console
    for user in ("a/b", "..", "."):
        body = {"user_id": user, "kind": "fact", "scope": "global", "text": f"Fact of {user}."}
        assert client.post("/v1/memories", json=body).status_code == 201
        listed = client.get("/console/users", params={"q": user})
        link = re.search(r'href="(/console/user\?id=[^"]+)"', listed.text)[1]
        page = client.get(link.replace("&amp;", "&"))
        assert page.status_code == 200, page.text
        assert f"Fact of {user}." in page.text


def test_an_odd_cookie_of_another_app_on_the_host_does_not_hide_the_console_s(console):
    client, known = console
    cookie = "theme=dark mode; am_console_key=am_x"
    page = client.get("/console/permissions", headers={"cookie": cookie})
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)[1]
    assert token != _token(client)  # bound to the key in the cookie, which was found
    answer = client.post(
        "/console/permissions/rules",
        data={
            "csrf": token,
            "user_id": known.user,
            "tool_name": "x",
            "pattern": "y",
            "action": "BLOCK",
        },
        headers={"cookie": cookie},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text


def test_a_file_where_a_field_is_expected_names_the_field(console):
    client, _ = console
    answer = client.post(
        "/console/permissions/rules",
        data={"csrf": _token(client), "tool_name": "a", "pattern": "b", "action": "BLOCK"},
        files={"user_id": ("f.txt", b"abc")},
    )
    assert answer.status_code == 422
    assert "user_id: must be text, not a file" in answer.text
    _looks_like_the_console(answer)
