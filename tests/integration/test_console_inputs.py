"""The console's answers to bad input and what must be refused, in process
against the real stack (the browser test, tests/e2e/test_console.py, drives the
pages themselves). The test settings disable authentication: every console
request is the test app's, as an admin key's would be."""

from __future__ import annotations

import re

import pytest

from services.console.session import CSP


def _csrf(client) -> str:
    page = client.get("/console/permissions")
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf" value="([^"]+)"', page.text)[1]


@pytest.mark.parametrize(
    ("path", "status", "problem"),
    [
        ("/console/users?q=%00", 422, "q: must not contain control characters"),
        ("/console/user?id=bad%07id", 422, "id: must not contain control characters"),
        ("/console/user?id=a&project=%00", 422, "project: must not contain control characters"),
        ("/console/user?id=nobody-at-all", 404, "user_id: no user &#39;nobody-at-all&#39;"),
        ("/console/events?id=not-an-id", 422, "id: an event id is a UUID"),
        ("/console/dead-letters?subscription=nope", 404, "subscription: no subscription"),
    ],
)
def test_bad_input_gets_a_page_naming_the_field(client, path, status, problem):
    answer = client.get(path)
    assert answer.status_code == status, answer.text
    assert problem in answer.text
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["content-type"].startswith("text/html")


def test_a_post_needs_the_csrf_token_of_its_cookie(client):
    token = _csrf(client)
    path = "/console/dead-letters/turns-summary/replay"
    assert client.post(path, data={"event_id": "x"}).status_code == 403
    assert client.post(path, data={"event_id": "x", "csrf": token + "x"}).status_code == 403
    ticked_none = client.post(path, data={"csrf": token})
    assert ticked_none.status_code == 422
    assert "event_id: tick at least one dead letter" in ticked_none.text


def test_sign_in_without_a_key_names_the_field(client):
    answer = client.post("/console/sign-in", data={"key": " "})
    assert answer.status_code == 401
    assert "key: enter an API key of your app" in answer.text
    assert "am_console_key" not in answer.headers.get("set-cookie", "")


def test_memories_and_turns_show_as_text_never_as_markup(client, ids):
    probe = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    written = client.post(
        "/v1/memories",
        json={"user_id": ids["user_id"], "kind": "fact", "scope": "global", "text": probe},
    )
    assert written.status_code == 201, written.text
    page = client.get("/console/user", params={"id": ids["user_id"]})
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
    client, ids, arguments
):
    token = _csrf(client)
    answer = client.post(
        "/console/permissions/evaluate",
        data={
            "csrf": token,
            "user_id": ids["user_id"],
            "tool_name": "shell",
            "tool_args": arguments,
        },
    )
    assert answer.status_code == 422, answer.text
    assert "tool_args: " in answer.text


def test_a_user_id_that_is_not_a_path_segment_links_to_its_own_page(client, ids):
    for user in ("a/b", "..", "."):
        body = {"user_id": user, "kind": "fact", "scope": "global", "text": f"Fact of {user}."}
        assert client.post("/v1/memories", json=body).status_code == 201
        listed = client.get("/console/users", params={"q": user})
        link = re.search(r'href="(/console/user\?id=[^"]+)"', listed.text)[1]
        page = client.get(link.replace("&amp;", "&"))
        assert page.status_code == 200, page.text
        assert f"Fact of {user}." in page.text


def test_an_odd_cookie_of_another_app_on_the_host_does_not_hide_the_console_s(client):
    cookie = "theme=dark mode; am_console_key=am_x"
    page = client.get("/console/permissions", headers={"cookie": cookie})
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)[1]
    assert token != _csrf(client)  # bound to the key in the cookie, which was found
    answer = client.post(
        "/console/permissions/rules",
        data={
            "csrf": token,
            "user_id": "u-odd",
            "tool_name": "x",
            "pattern": "y",
            "action": "BLOCK",
        },
        headers={"cookie": cookie},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
