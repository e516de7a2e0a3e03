"""The fake Gemini endpoint of tests/fake_gemini.py with a realistic latency, in a
process of its own (its CPU must not count as the workers').

generateContent answers after `--generate-ms`, the embedding methods after
`--embed-ms`, each +-`--jitter` (a fraction, uniform). generateContent plays a
tiny model that the extraction worker can use: an extraction reply holds one
memory for a user line "My <entity> is now <value>." (none otherwise), and a
consolidation reply UPDATEs the existing memory of the candidate's entity, else
CREATEs it. It prints `listening on <url>` once it answers; SIGTERM stops it.

    .venv/bin/python -m bench.slow_gemini [--generate-ms 800] [--embed-ms 150] [--jitter 0.25]
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fake_gemini import FakeGemini, Reply, Request, json_reply, text_reply  # noqa: E402

# The stdlib's listen backlog is 5: a burst of new connections (httpx keeps only 20
# idle ones per client, so 64 handlers open some per call) would wait on SYN retries.
ThreadingHTTPServer.request_queue_size = 1024

STATEMENT = re.compile(r"^User: My (?P<entity>.+?) is now (?P<value>.+?)\.$", re.MULTILINE)
CANDIDATE = re.compile(r"^  entity: (?P<entity>[^;]+);.*\n  text: (?P<text>.*)$", re.MULTILINE)
EXISTING = re.compile(r"^- id: (?P<id>[^;]+); entity: (?P<entity>[^;]+);", re.MULTILINE)


class QuietGemini(FakeGemini):
    """Keeps no record of requests (a long benchmark would hold them all)."""

    def _next(self, request: Request) -> Reply:
        return self.defaults[request.method](request)


def model(request: Request) -> Reply:
    """A structured reply for whichever task the request's response schema is."""
    schema = request.body.get("generationConfig", {}).get("responseJsonSchema") or {}
    fields = schema.get("properties", {})
    prompt = request.prompt_text()
    if "memories" in fields:
        found = STATEMENT.search(prompt)
        memories = []
        if found:
            entity, value = found["entity"], found["value"]
            memories.append(
                {
                    "entity_name": entity,
                    "kind": "preference",
                    "scope": "global",
                    "project_id": "",
                    "text": f"User's {entity} is {value}.",
                }
            )
        return json_reply({"memories": memories}, prompt_tokens=400)
    if "action" in fields:
        candidate = CANDIDATE.search(prompt)
        entity, text = (candidate["entity"], candidate["text"]) if candidate else ("", "")
        same = [m["id"] for m in EXISTING.finditer(prompt) if m["entity"] == entity]
        if same:
            return json_reply({"action": "UPDATED", "target_id": same[0], "text": text})
        return json_reply({"action": "CREATED", "target_id": None, "text": text or "A fact."})
    if "summary" in fields:
        return json_reply({"summary": "The user talked about their settings."})
    if "additions" in fields:
        return json_reply({"additions": ""})
    if "queries" in fields:
        return json_reply({"queries": [prompt.split("\n", 1)[0].removeprefix("Query: ")]})
    return text_reply("pong")  # the workers' probe


def slowed(answer: Callable[[Request], Reply], ms: float, jitter: float) -> Callable:
    def reply(request: Request) -> Reply:
        found = answer(request)
        found.delay = ms / 1000 * random.uniform(1 - jitter, 1 + jitter)  # noqa: S311
        return found

    return reply


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generate-ms", type=float, default=800.0)
    parser.add_argument("--embed-ms", type=float, default=150.0)
    parser.add_argument("--jitter", type=float, default=0.25, help="e.g. 0.25 for +-25%%")
    args = parser.parse_args()
    fake = QuietGemini()
    fake.defaults["generateContent"] = model
    for method, ms in (
        ("generateContent", args.generate_ms),
        ("embedContent", args.embed_ms),
        ("batchEmbedContents", args.embed_ms),
        ("predict", args.embed_ms),
    ):
        fake.defaults[method] = slowed(fake.defaults[method], ms, args.jitter)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with fake:
        print(f"listening on {fake.url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
