"""An HTTP endpoint of the test's own that the emulator pushes to, as to a webhook
(the `webhook` fixture of tests/conftest.py subscribes it to memory.changed.v1).
What a test reads there was published: the outbox it came from is emptied as the
change relay goes (`shared.bus.changes`)."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Webhook:
    """An HTTP endpoint that records what Pub/Sub pushes to it and acknowledges it."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                push = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                message = push["message"]
                event = json.loads(base64.b64decode(message["data"]))
                received.append({"attributes": message.get("attributes", {}), **event})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/memory-changed"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, app: str) -> list[dict]:
        return [event for event in list(self.received) if event["app"] == app]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
