"""What the console's browser tests (tests/e2e/test_console*.py) drive: `agent-memory
up`, Debian's Chromium through playwright, and the API beside the browser to set
things up."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from playwright.sync_api import Browser, Locator, Page, sync_playwright

from services.dev.localstack.process import free_port
from tests.e2e.test_up import Up, _clean_env
from tests.support import REPO, wait_for

CHROMIUM = os.environ.get("AM_TEST_CHROMIUM", "/usr/bin/chromium")
# Headless, and none of Chromium's own calls home: this machine has no network.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}


@dataclass
class Stack:
    up: Up
    endpoints: dict
    key: str  # the development key `up` made: an admin key of app `default`

    @property
    def url(self) -> str:
        return self.up.api_url

    def api(self, method: str, path: str, key: str | None = None, **kwargs: object) -> dict:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        answer = httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)
        assert answer.status_code < 300, answer.text
        return answer.json()

    def cli(self, *args: str) -> str:
        """`agent-memory ARGS` against this stack, as a user who exported its variables."""
        env = _clean_env(
            AM_DATABASE_URL=self.endpoints["database_url"],
            AM_VALKEY_URL=self.endpoints["valkey_url"],
            PUBSUB_EMULATOR_HOST=self.endpoints["pubsub_emulator_host"],
            GOOGLE_CLOUD_PROJECT=self.endpoints["google_cloud_project"],
        )
        done = subprocess.run(
            [sys.executable, "-m", "services.cli", *args],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def publish_poison(self, app: str = "default") -> str:
        """A turn event that passes the topic's Avro schema but not our rules (a
        control character in its user id), straight onto the turns topic; its id."""
        script = (
            "import json, sys, uuid\n"
            "from shared.config import load_settings\n"
            "from shared.bus.publisher import EventPublisher\n"
            "from shared.events import encode\n"
            "from tests.bus_helpers import make_turn\n"
            "ids = {'app': sys.argv[1], 'user_id': 'u-poison', 'session_id': 's-poison'}\n"
            "good = encode(make_turn(ids, 1))\n"
            "bad = dict(json.loads(good.data), user_id='bad\\x07id')\n"
            "publisher = EventPublisher(load_settings())\n"
            "publisher.publish_raw(publisher.topic_path('turns'), json.dumps(bad).encode(),\n"
            "    good.attributes, good.ordering_key).result(30)\n"
            "publisher.stop()\n"
            "print(bad['event_id'])\n"
        )
        env = _clean_env(
            PUBSUB_EMULATOR_HOST=self.endpoints["pubsub_emulator_host"],
            GOOGLE_CLOUD_PROJECT=self.endpoints["google_cloud_project"],
        )
        done = subprocess.run(
            [sys.executable, "-c", script, app],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return done.stdout.strip().splitlines()[-1]

    def worker_pids(self, kind: str) -> list[int]:
        entries = json.loads((self.up.data_dir / "pids.json").read_text())
        return [e["pid"] for e in entries if e["name"].split("-")[0] == kind]

    def pause(self, kind: str, resume: bool = False) -> None:
        """SIGSTOP (or SIGCONT) every replica of a worker kind: a real stall."""
        for pid in self.worker_pids(kind):
            os.kill(pid, signal.SIGCONT if resume else signal.SIGSTOP)


def start_stack(data_dir: Path, port: int) -> Stack:
    up = Up(data_dir, port)
    endpoints = up.wait_ready()
    key = (data_dir / "dev-api-key").read_text().strip()
    return Stack(up, endpoints, key)


def serve_stack(data_dir: Path) -> Iterator[Stack]:
    """A module's stack (its fixture yields from this), stopped after its tests."""
    started = start_stack(data_dir, free_port())
    try:
        yield started
    finally:
        started.pause("extraction", resume=True)  # never leave a stopped process behind
        started.up.stop()


def launch_chromium() -> Iterator[Browser]:
    """A module's headless Chromium (its fixture yields from this)."""
    assert os.access(CHROMIUM, os.X_OK), (
        f"no Chromium at {CHROMIUM}: `make test` installs Debian's as root; "
        "else install it or set AM_TEST_CHROMIUM (README)"
    )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def signed_in(
    browser: Browser, stack: Stack, key: str | None = None, viewport: dict = WIDE
) -> Page:
    """A new browser context, signed in with `key` (the admin key by default)."""
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.goto(f"{stack.url}/console")
    page.fill("#key", key or stack.key)
    page.click("form[action='/console/sign-in'] button")
    page.wait_for_url(f"{stack.url}/console")
    return page


def shoot(page: Page, folder: Path, name: str) -> None:
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def reload_until(page: Page, url: str, locator: Locator, what: str, seconds: float = 30) -> None:
    """Open `url` again until `locator` is on it: for pages that show a moment's state."""

    def shown() -> bool:
        page.goto(url)
        return locator.count() > 0

    wait_for(shown, seconds, what, interval=0.5)


class OtherSite:
    """A page of another origin on this host (127.0.0.1, a port of its own), as an
    attacker would serve one beside the console: `page` is its HTML."""

    def __init__(self, page: str) -> None:
        body = page.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtherSite:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
