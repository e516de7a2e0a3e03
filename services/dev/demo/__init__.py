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
prints a report, writes `report.json` and `tokens_per_turn.png` (with matplotlib,
the `report` extra) to `--out`, and exits non-zero if a check fails, keeping the
run's folder and its logs. A `gemini` provider without credentials, or an
`openai` endpoint out of reach, stops it before the stack starts (exit 2). Log
lines go to `logs/demo.log` in the run's folder, not into the report.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from services.dev.demo import long_session, preflight, reference, report
from services.dev.demo.api import Api, Check, DemoError, llm_tokens
from services.dev.localstack.components import ComponentError
from services.dev.localstack.stack import LocalStack, StackError
from shared.config import Settings
from shared.logging import configure_logging


def say(text: str) -> None:
    print(text, flush=True)


def run_demo(
    settings: Settings,
    keep: bool = False,
    llm: str | None = None,
    embeddings: str | None = None,
    out: Path = Path("demo-report"),
) -> int:
    demo_settings = _demo_settings(settings, llm, embeddings)
    problem = preflight.gemini_problem(demo_settings) or preflight.openai_problem(demo_settings)
    if problem:
        print(f"agent-memory demo: {problem}", file=sys.stderr, flush=True)
        return 2
    data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-demo-"))
    log_path = _log_to_file(data_dir)
    providers: dict[str, str] = {
        "llm": demo_settings.llm_provider,
        "embeddings": demo_settings.embedding_provider,
    }
    # The stack's processes read their providers from the environment it passes on.
    os.environ["AM_LLM_PROVIDER"] = providers["llm"]
    os.environ["AM_EMBEDDING_PROVIDER"] = providers["embeddings"]
    if demo_settings.openai_api_key is not None:  # settings_env-like copies hide secrets
        os.environ["AM_OPENAI_API_KEY"] = demo_settings.openai_api_key.get_secret_value()
    stack = LocalStack(
        demo_settings,
        data_dir,
        fast=not keep,
        any_api_port=True,
        progress=lambda line: say(f"  {line}"),
    )
    # SIGTERM (a CI timeout, `kill`) must still stop the stack: make it unwind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    say(f"starting a fresh local stack in {data_dir} (logs: {log_path.parent}) ...")
    code = 1  # an exception (Ctrl-C, SIGTERM) is a failed run too
    try:
        code = _play(stack, providers, out)
    finally:
        if code != 0:
            say(f"the run failed: its data and logs are kept in {data_dir} (see {log_path.parent})")
        elif keep:
            say(f"data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    return code


def _log_to_file(data_dir: Path) -> Path:
    """Send this process's log lines (the stack's start and stop) to a file in the
    run's folder: the terminal shows the demo's story and report only."""
    log_dir = data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / "demo.log"
    # Open for the rest of the process: every later log line is written to it.
    configure_logging("json", "INFO", stream=path.open("a", encoding="utf-8"))  # noqa: SIM115
    return path


def _play(stack: LocalStack, providers: dict[str, str], out: Path) -> int:
    """Start the stack, play the scenarios, stop it, report; the exit status."""
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
        result = long_session.play(api, say, lambda: llm_tokens(metrics))
    except (DemoError, TimeoutError) as exc:
        say(f"\nFAIL: {exc}")
        return 1
    finally:
        api.close()
        stack.stop()
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
    out: Path, providers: dict[str, str], result: long_session.SessionResult, checks: list[Check]
) -> int:
    """Print and write the report; the exit status: 1 if a check failed."""
    numbers = report.figures(result)
    checks += result.checks + report.target_checks(numbers)
    json_path, chart = report.write(out, providers, result, numbers, checks)
    for line in report.lines(providers, numbers, checks):
        say(line)
    failed = [c for c in checks if not c.passed]
    say(f"\nreport: {json_path}; chart: {chart}")
    verdict = "FAIL" if failed else "PASS"
    say(f"{verdict}: {len(checks) - len(failed)} of {len(checks)} checks passed")
    return 1 if failed else 0
