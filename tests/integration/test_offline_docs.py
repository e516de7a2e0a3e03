"""`/docs` and `/redoc` render with no network: every script, stylesheet, icon and
CSS import they load is served by the API itself, with no key (authentication is
on here), and nothing names another host."""

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app

BASE = "http://testserver"
JS = ("text/javascript", "application/javascript")
# A CSS url(...): quoted (the SVG data URIs hold escaped quotes and parentheses) or bare.
CSS_URL = re.compile(r"""url\(\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^)'"]*)\s*\)""")
CSS_IMPORT = re.compile(r"""@import\s+(?:url\()?\s*["']([^"']*)["']""")


@pytest.fixture
def client(app_settings, topology):
    settings = app_settings.model_copy(update={"auth_disabled": False})
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


class _References(HTMLParser):
    """(tag, rel, url) of every src= and href= in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("src", "href"):
            if values.get(name) is not None:
                self.found.append((tag, values.get("rel") or "", values[name]))


def _references(html: str) -> list[tuple[str, str, str]]:
    parser = _References()
    parser.feed(html)
    parser.close()
    return parser.found


def _on_the_api(client, page: str, url: str):
    """GET `url` (as referenced from `page`) from the API, after checking it is
    relative or the API's own."""
    assert not url.startswith("//"), url  # protocol-relative: another host
    absolute = urljoin(BASE + page, url)
    parts = urlsplit(absolute)
    assert (parts.scheme, parts.netloc) == ("http", "testserver"), url
    answer = client.get(absolute)
    assert answer.status_code == 200, (url, answer.status_code)
    return answer


def _check_page(client, path: str) -> dict[str, str]:
    """The page's checks; returns its assets' content types by kind."""
    page = client.get(path)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    # Not only attributes: nothing in the page (inline scripts included) names a host.
    assert not re.search(r"https?:|//[a-z0-9]", page.text, re.I), page.text
    _check_policy(page.headers["content-security-policy"])
    kinds = {}
    for tag, rel, url in _references(page.text):
        answer = _on_the_api(client, path, url)
        content_type = answer.headers["content-type"].split(";")[0]
        if tag == "script":
            assert content_type in JS, (url, content_type)
            kinds["script"] = url
        elif "stylesheet" in rel:
            assert content_type == "text/css", (url, content_type)
            _check_stylesheet(client, url, answer.text)
            kinds["stylesheet"] = url
        elif "icon" in rel:
            assert content_type.startswith("image/"), (url, content_type)
            kinds["icon"] = url
        else:
            raise AssertionError(f"an unexpected reference in {path}: <{tag} {rel}> {url}")
    return kinds


def _check_policy(policy: str) -> None:
    """The browser may load from the API only, whatever the bundles try (Redoc's
    sidebar logo is on its CDN): every source is 'self' or a keyword, never a host."""
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["default-src"] == "'self'"
    for sources in directives.values():
        for source in sources.split():
            assert source.startswith("'") or source in ("data:", "blob:"), policy


def _check_stylesheet(client, url: str, css: str) -> None:
    imports = [m.group(1) for m in CSS_URL.finditer(css)] + CSS_IMPORT.findall(css)
    assert imports  # the parse works: swagger-ui.css has its icons as data: URIs
    for found in imports:
        target = found.strip("\"'")
        if target.startswith("data:"):
            continue
        _on_the_api(client, url, target)


def test_swagger_ui_is_served_offline(client):
    kinds = _check_page(client, "/docs")
    assert set(kinds) == {"script", "stylesheet", "icon"}
    page = client.get("/docs").text
    # "Try it out" reads the schema at the app's openapi_url.
    assert f"url: '{client.app.openapi_url}'" in page
    schema = client.get(client.app.openapi_url)
    assert schema.status_code == 200
    assert "openapi" in schema.json()
    redirect = client.get(client.app.swagger_ui_oauth2_redirect_url)
    assert redirect.status_code == 200
    assert redirect.headers["content-type"].startswith("text/html")
    assert not re.search(r"https?:", redirect.text, re.I)
    _check_policy(redirect.headers["content-security-policy"])


def test_redoc_is_served_offline(client):
    kinds = _check_page(client, "/redoc")
    assert set(kinds) == {"script", "icon"}
    assert f'spec-url="{client.app.openapi_url}"' in client.get("/redoc").text
    assert "fonts.googleapis" not in client.get("/redoc").text


def test_the_docs_pages_are_not_in_the_schema(client):
    paths = client.get(client.app.openapi_url).json()["paths"]
    assert paths  # the API's own routes are
    assert not [p for p in paths if p.startswith(("/docs", "/redoc"))]
