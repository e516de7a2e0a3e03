"""The fake Gemini endpoint of tests/fake_gemini.py with a realistic latency, in a
process of its own (its CPU must not count as the workers').

generateContent answers after `--generate-ms`, the embedding methods after
`--embed-ms`, each +-`--jitter` (a fraction, uniform). generateContent is
`tests.fake_gemini_model.offline_model`: it answers a window's extraction and the
batched consolidation as the `offline` provider would, and reports
Gemini-style usage (prompt and output tokens counted from the request and the
reply). It prints `listening on <url>` once it answers; SIGTERM stops it.

    .venv/bin/python -m bench.slow_gemini [--generate-ms 800] [--embed-ms 150] [--jitter 0.25]
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fake_gemini import FakeGemini, Reply, Request  # noqa: E402
from tests.fake_gemini_model import offline_model  # noqa: E402

# The stdlib's listen backlog is 5: a burst of new connections (httpx keeps only 20
# idle ones per client, so 64 handlers open some per call) would wait on SYN retries.
ThreadingHTTPServer.request_queue_size = 1024


class QuietGemini(FakeGemini):
    """Keeps no record of requests (a long benchmark would hold them all)."""

    def _next(self, request: Request) -> Reply:
        return self.defaults[request.method](request)


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
    fake.defaults["generateContent"] = offline_model
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
