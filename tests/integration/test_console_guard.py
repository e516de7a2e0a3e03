"""The console's guard on what it is sent, in process with authentication on: the
form token bound to the signed-in key, the browser's word on where a POST comes
from (Origin, Sec-Fetch-Site), a cookie sent twice, the cookies' scope over HTTP
and HTTPS, and a deep link that survives the sign-in. Tossing a cookie from
another port in a real browser is tests/e2e/test_console.py's."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.console.access import KEY_COOKIE, SECURE_KEY_COOKIE
from shared.api_keys import create_key
from shared.bus.admin import TopologyAdmin
from tests.conftest import make_settings


@pytest.fixture(scope="module")
def keys(stack) -> dict[str, str]:
    app = f"app-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        admin, _ = create_key(conn, app, admin=True)
        other, _ = create_key(conn, app, admin=True)
    return {"app": app, "admin": admin, "other": other}


class Browser:
    """One browser's cookies over the app's one client (its lifespan, its pools):
    each request sends them, and keeps what the answer sets."""

    def __init__(self, client: TestClient, base: str = "http://testserver") -> None:
        self.client, self.base, self.app = client, base, client.app
        self.jar: dict[str, str] = {}

    def request(self, method: str, path: str, **kwargs) -> object:
        headers = dict(kwargs.pop("headers", {}))
        if self.jar and "cookie" not in headers:
            headers["cookie"] = "; ".join(f"{k}={v}" for k, v in self.jar.items())
        self.client.cookies.clear()
        answer = self.client.request(
            method, self.base + path, headers=headers, follow_redirects=False, **kwargs
        )
        for name, value in answer.cookies.items():
            self.jar[name] = value
        for header in answer.headers.get_list("set-cookie"):
            if "Max-Age=0" in header:
                self.jar.pop(header.split("=", 1)[0], None)
        self.client.cookies.clear()
        return answer

    def get(self, path: str, **kwargs) -> object:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> object:
        return self.request("POST", path, **kwargs)


@pytest.fixture(scope="module")
def app(stack, keys) -> Iterator[TestClient]:
    settings = make_settings(stack, auth_disabled=False, default_app=keys["app"])
    TopologyAdmin(settings).apply()
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def _client(app: TestClient, base: str = "http://testserver") -> Browser:
    return Browser(app, base)


@pytest.fixture
def signed(app, keys) -> Browser:
    browser = _client(app)
    answer = browser.post("/console/sign-in", data={"key": keys["admin"]})
    assert answer.status_code == 303, answer.text
    return browser


def _token(client: Browser) -> str:
    page = client.get("/console/permissions")
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf" value="([^"]+)"', page.text)[1]


def _rule(user: str, token: str) -> dict[str, str]:
    return {
        "csrf": token,
        "user_id": user,
        "tool_name": "shell",
        "pattern": "rm",
        "action": "BLOCK",
    }


def _rules(client: Browser, key: str, user: str) -> list:
    answer = client.client.get(
        "/v1/permissions/rules",
        params={"user_id": user},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["rules"]


def test_the_token_is_the_signed_in_key_s_and_no_other(app, signed, keys):
    token = _token(signed)
    other = _client(app)
    other.post("/console/sign-in", data={"key": keys["other"]})
    assert _token(other) != token  # another key: another token
    assert _token(signed) == token  # the same key: the same token, on every page
    user = f"u-{uuid.uuid4().hex[:8]}"
    for sent in (None, "", "forged", _token(other)):
        form = _rule(user, sent) if sent is not None else _rule(user, "")
        if sent is None:
            del form["csrf"]
        answer = signed.post("/console/permissions/rules", data=form)
        assert answer.status_code == 403, answer.text
        assert "CSRF token" in answer.text
    assert _rules(signed, keys["admin"], user) == []
    done = signed.post("/console/permissions/rules", data=_rule(user, token))
    assert done.status_code == 303, done.text
    assert len(_rules(signed, keys["admin"], user)) == 1


def test_every_form_of_the_console_checks_its_token(signed):
    posts = [
        route.path
        for route in signed.app.routes
        if route.path.startswith("/console") and "POST" in getattr(route, "methods", ())
    ]
    assert len(posts) == 13
    for path in posts:
        if path == "/console/sign-in":
            continue  # no key yet to bind a token to: its guard is the origin's
        path = path.replace("{subscription}", "turns-summary").replace("{rule_id}", "x")
        answer = signed.post(path, data={"csrf": "forged"})
        assert answer.status_code == 403, (path, answer.text)
        assert "CSRF token" in answer.text
    assert signed.get("/console").status_code == 200  # still signed in


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"Origin": "http://testserver:9999"}, "another origin (http://testserver:9999)"),
        ({"Origin": "https://testserver"}, "another origin (https://testserver)"),
        ({"Origin": "http://evil.example"}, "another origin"),
        ({"Origin": "null"}, "another origin (null)"),
        ({"Sec-Fetch-Site": "same-site"}, "another site (Sec-Fetch-Site: same-site)"),
        ({"Sec-Fetch-Site": "cross-site"}, "another site (Sec-Fetch-Site: cross-site)"),
        (
            {"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:9999"},
            "another origin",
        ),
    ],
)
def test_a_post_from_another_origin_is_refused_whatever_its_token(signed, keys, headers, why):
    user = f"u-{uuid.uuid4().hex[:8]}"
    answer = signed.post(
        "/console/permissions/rules",
        data=_rule(user, _token(signed)),
        headers=headers,
    )
    assert answer.status_code == 403, answer.text
    assert why in answer.text
    assert _rules(signed, keys["admin"], user) == []


def test_a_post_the_browser_says_is_this_origin_s_goes_through(signed, keys):
    user = f"u-{uuid.uuid4().hex[:8]}"
    answer = signed.post(
        "/console/permissions/rules",
        data=_rule(user, _token(signed)),
        headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
    )
    assert answer.status_code == 303, answer.text
    assert len(_rules(signed, keys["admin"], user)) == 1


def test_a_sign_in_from_another_origin_is_refused(app, keys):
    client = _client(app)
    answer = client.post(
        "/console/sign-in",
        data={"key": keys["admin"]},
        headers={"Origin": "http://testserver:9999", "Sec-Fetch-Site": "same-site"},
    )
    assert answer.status_code == 403, answer.text
    assert KEY_COOKIE not in answer.headers.get("set-cookie", "")


def test_a_request_with_the_key_cookie_twice_is_refused(app, keys):
    user = f"u-{uuid.uuid4().hex[:8]}"
    client = _client(app)
    signed_in = client.post("/console/sign-in", data={"key": keys["admin"]})
    token = _token(client)
    key = keys["admin"]
    for cookie in (
        f"{KEY_COOKIE}={key}; {KEY_COOKIE}={key}",  # even the same value twice
        f"{KEY_COOKIE}={key}; {KEY_COOKIE}=evil",
        f"{KEY_COOKIE}=evil; {KEY_COOKIE}={key}",
    ):
        bare = _client(app)
        page = bare.get("/console/users", headers={"cookie": cookie})
        assert page.status_code == 400, page.text
        assert f"the cookie {KEY_COOKIE} came 2 times" in page.text
        assert page.headers["content-type"].startswith("text/html")
        posted = bare.post(
            "/console/permissions/rules",
            data=_rule(user, token),
            headers={"cookie": cookie},
        )
        assert posted.status_code == 400, posted.text
        assert "set-cookie" not in posted.headers  # nobody is signed out by it
    assert signed_in.status_code == 303
    assert _rules(client, keys["admin"], user) == []


def test_over_http_the_key_cookie_is_the_console_s_only(app, keys):
    client = _client(app)
    answer = client.post("/console/sign-in", data={"key": keys["admin"]})
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{KEY_COOKIE}={keys['admin']}; ")
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert attributes == {"httponly", "path=/console", "samesite=strict"}
    assert answer.headers.get_list("set-cookie") == [cookie]  # no other cookie


def test_over_https_the_key_cookie_is_host_only_and_secure(app, keys):
    client = _client(app, "https://testserver")
    answer = client.post("/console/sign-in", data={"key": keys["admin"]})
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{SECURE_KEY_COOKIE}={keys['admin']}; ")
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert attributes == {"httponly", "path=/", "samesite=strict", "secure"}
    # Over HTTPS only the __Host- cookie signs in; a plain one of the same key does not.
    assert client.get("/console/users").status_code == 200
    plain = _client(app, "https://testserver")
    plain.jar[KEY_COOKIE] = keys["admin"]
    assert plain.get("/console/users").status_code == 303
    out = client.post("/console/sign-out", data={"csrf": _token(client)})
    assert out.status_code == 303
    gone = out.headers["set-cookie"]
    assert gone.startswith(f'{SECURE_KEY_COOKIE}=""; ') and "Max-Age=0" in gone, gone
    assert "Path=/;" in gone and "Secure" in gone


def test_a_deep_link_survives_the_sign_in_with_its_query(app, keys):
    client = _client(app)
    asked = "/console/user?id=alice&q=prefer"
    answer = client.get(asked)
    assert answer.status_code == 303
    assert (
        answer.headers["location"]
        == "/console/sign-in?next=/console/user%3Fid%3Dalice%26q%3Dprefer"
    )
    form = client.get(answer.headers["location"])
    assert f'name="next" value="{asked.replace("&", "&amp;")}"' in form.text
    signed_in = client.post("/console/sign-in", data={"key": keys["admin"], "next": asked})
    assert signed_in.headers["location"] == asked


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/console",
        "https://evil.example/console",
        "/console/\\evil.example",
        "/consolex",
        "/v1/memories",
        "/console\r\nSet-Cookie: x=1",
    ],
)
def test_after_sign_in_the_console_goes_nowhere_else(app, keys, target):
    client = _client(app)
    signed_in = client.post("/console/sign-in", data={"key": keys["admin"], "next": target})
    assert signed_in.headers["location"] == "/console"


def test_a_refresh_of_the_overview_signed_out_sends_the_page_to_the_sign_in(app):
    client = _client(app)
    answer = client.get(
        "/console/figures",
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/console"},
    )
    assert answer.status_code == 204
    assert answer.headers["hx-redirect"] == "/console/sign-in?next=/console"


@pytest.mark.parametrize(
    "cookie", [KEY_COOKIE, f"{KEY_COOKIE}=", f'{KEY_COOKIE}="', f"x; {KEY_COOKIE}; y=1", "=; ;"]
)
def test_a_key_cookie_without_a_key_asks_for_one(app, cookie):
    answer = _client(app).get("/console/users", headers={"cookie": cookie})
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/console/sign-in?next=/console/users"
