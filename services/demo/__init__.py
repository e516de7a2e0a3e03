"""`agent-memory demo` (what `make demo` runs): a fresh local stack (the API and
the summary, extraction and compaction workers as separate processes), then,
through the HTTP API only, as an agent would:

1. the reference scenario of long-term memory (two sessions, global and project
   scopes, cross-session recall, no leaks, Light Mode superseding Dark Mode);
2. the reference permission checks;
3. a long development session of 45 turns with heavy tool output, and the
   tokens tiered memory saves against stuffing the whole history into prompts,
   background tokens (every LLM prompt the workers built) included.

It waits for the pipeline by polling with deadlines, never by fixed sleeps,
prints a report, writes `report.json` and `tokens_per_turn.png` to `--out`, and
exits non-zero if a check fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from services.demo import reference, report, session
from services.demo.api import Api, Check, DemoError, llm_tokens
from shared.config import Settings
from shared.localstack.components import ComponentError
from shared.localstack.stack import LocalStack, StackError


def say(text: str) -> None:
    print(text, flush=True)


def run_demo(
    settings: Settings,
    keep: bool = False,
    llm: str | None = None,
    embeddings: str | None = None,
    out: Path = Path("demo-report"),
) -> int:
    data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-demo-"))
    demo_settings = _demo_settings(settings, llm, embeddings)
    providers = {"llm": demo_settings.llm_provider, "embeddings": demo_settings.embedding_provider}
    # The stack's processes read their providers from the environment it passes on.
    os.environ["AM_LLM_PROVIDER"] = providers["llm"]
    os.environ["AM_EMBEDDING_PROVIDER"] = providers["embeddings"]
    stack = LocalStack(demo_settings, data_dir, fast=not keep, any_api_port=True)
    # SIGTERM (a CI timeout, `kill`) must still stop the stack: make it unwind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    say(f"starting a fresh local stack in {data_dir} ...")
    try:
        endpoints = stack.start()
    except (StackError, ComponentError) as exc:
        say(f"demo: could not start the stack: {exc}")
        return 1
    say(
        f"stack up: API {endpoints.api_url}; workers: summary, extraction, compaction; "
        f"LLM {providers['llm']}, embeddings {providers['embeddings']}"
    )
    api = Api(endpoints.api_url, stack.dev_api_key or "")
    metrics = {
        name: f"http://127.0.0.1:{port}/"
        for name, port in stack.metrics_ports.items()
        if name in ("api", "summary", "extraction")
    }
    try:
        checks, _ = reference.play(api, say)
        result = session.play(api, say, lambda: llm_tokens(metrics))
    except (DemoError, TimeoutError) as exc:
        say(f"\nFAIL: {exc}")
        return 1
    finally:
        api.close()
        stack.stop()
        if keep:
            say(f"data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    return _report(out, providers, result, checks)


def _demo_settings(settings: Settings, llm: str | None, embeddings: str | None) -> Settings:
    """`settings` for a stack of the demo's own (no given URL), with the providers
    asked for."""
    updates: dict[str, object] = {
        "database_url": None,
        "valkey_url": None,
        "pubsub_emulator_host": None,
    }
    if llm:
        updates["llm_provider"] = llm
    if embeddings:
        updates["embedding_provider"] = embeddings
    return settings.model_copy(update=updates)


def _report(
    out: Path, providers: dict[str, str], result: session.SessionResult, checks: list[Check]
) -> int:
    """Print and write the report; the exit status: 1 if a check failed."""
    numbers = report.figures(result)
    checks += result.checks + report.target_checks(numbers)
    json_path, chart_path = report.write(out, providers, result, numbers, checks)
    for line in report.lines(providers, numbers, checks):
        say(line)
    failed = [c for c in checks if not c.passed]
    say(f"\nreport: {json_path}; chart: {chart_path}")
    verdict = "FAIL" if failed else "PASS"
    say(f"{verdict}: {len(checks) - len(failed)} of {len(checks)} checks passed")
    return 1 if failed else 0
