"""Part two of the demo: a long development session of 45 turns with heavy tool
output, generated from a seed, and what tiered memory saves against stuffing the
whole history into every prompt.

Turns 1-5 state a preference and project rules that the later turns rely on;
turns 6-45 are work: each runs a tool whose output (code, a stack trace, a test
log) is a few thousand tokens. Before each turn the agent asks `/v1/context` for
the turn's prompt; the report compares, per turn, that instruction plus the new
message (tiered) with every earlier turn verbatim plus the new message (naive).
The agent does not wait for the pipeline between turns; before turn 45 it waits
until the rules of turns 1-5 are memories (their windows closed long before), and
after turn 45 it ends the session with a flush.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.dev.demo.api import Api, Check, check, wait_until
from shared.tokens import estimate_tokens

USER, SESSION, PROJECT = "dev_ada", "sess_orion_long", "Orion"
TURN_COUNT = 45
# Turns 1-5, each with the phrase that must reach the context of turn 45 when it
# states a rule (None: a preference or fact, recalled by relevance, not pinned).
OPENING = [
    (
        "Across all my projects, I always add type hints to Python functions.",
        "type hints",
    ),
    ("For project Orion, the backend is Go 1.22 with PostgreSQL 16.", None),
    ("For project Orion, all database migrations must be reversible.", "reversible"),
    ("In Orion we never log customer email addresses.", "customer email"),
    ("Orion API responses must be JSON with snake_case keys.", "snake_case"),
]
CLOSING = "Remember that the Orion release tag is v2.3.0."  # the last turn's fact
TASKS = [
    ("Run the test suite for the orders package.", "run_shell", "test_log"),
    ("Show me handlers/{name}.go.", "read_file", "code"),
    ("The service crashed in {name}; here is the trace. What happened?", "read_logs", "trace"),
    ("Review the migration for the {name} table.", "read_file", "code"),
    ("Run the integration tests again.", "run_shell", "test_log"),
]
WORDS = ["order", "invoice", "refund", "cart", "payment", "ledger", "shipment", "customer"]


@dataclass
class Turn:
    n: int
    user: str
    assistant: str
    tool_events: list[dict[str, Any]] = field(default_factory=list)

    def rendered(self) -> str:
        """The turn as a naive agent puts it in its history: everything, verbatim."""
        parts = [f"User: {self.user}"]
        for t in self.tool_events:
            parts.append(f"Tool {t['name']}({t['arguments']}):\n{t['output']}")
        parts.append(f"Assistant: {self.assistant}")
        return "\n".join(parts)


def _nouns(rng: random.Random, fewest: int, most: int) -> Iterator[tuple[int, str]]:
    """A random number of entries of a tool's output, each numbered, about a random noun."""
    for i in range(rng.randint(fewest, most)):
        yield i, rng.choice(WORDS)


def _code(rng: random.Random, name: str) -> str:
    lines = [f'package handlers\n\n// {name} handlers.\nimport (\n\t"context"\n\t"errors"\n)\n']
    for i, noun in _nouns(rng, 28, 40):
        lines.append(
            f"func {name.title()}{noun.title()}{i}(ctx context.Context, id int64) error {{\n"
            f'\trow, err := db.QueryRow(ctx, "SELECT * FROM {noun}s WHERE id = $1", id)\n'
            f'\tif err != nil {{\n\t\treturn fmt.Errorf("{noun} %d: %w", id, err)\n\t}}\n'
            f"\tif row.Total < {rng.randint(0, 999)} {{\n"
            f'\t\treturn errors.New("{noun} too small")\n'
            f"\t}}\n\treturn nil\n}}\n"
        )
    return "\n".join(lines)


def _trace(rng: random.Random, name: str) -> str:
    frames = []
    for i, noun in _nouns(rng, 60, 80):
        frames.append(
            f"goroutine {rng.randint(1, 999)} [running]:\norion/handlers.{name.title()}"
            f"{noun.title()}{i}(0xc000{rng.randint(100000, 999999)}, 0x{rng.randint(1, 99999):x})\n"
            f"\t/src/orion/handlers/{noun}.go:{rng.randint(10, 400)} +0x{rng.randint(16, 4095):x}"
        )
    return f"panic: runtime error: invalid memory address in {name}\n\n" + "\n".join(frames)


def _test_log(rng: random.Random, name: str) -> str:
    lines = [f"=== RUN   Test{name.title()}Suite"]
    for i, noun in _nouns(rng, 110, 150):
        status = "FAIL" if rng.random() < 0.03 else "PASS"
        lines.append(
            f"--- {status}: Test{noun.title()}{i} ({rng.randint(0, 900) / 1000:.3f}s)\n"
            f"    {noun}_test.go:{rng.randint(10, 300)}: checked {rng.randint(1, 50)} {noun}s"
        )
    lines.append(f"ok  \torion/{name}\t{rng.randint(1, 30)}.{rng.randint(100, 999)}s")
    return "\n".join(lines)


def script(seed: int = 45) -> list[Turn]:
    """The 45 turns, the same for the same seed."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible script, not a secret
    turns = [Turn(n, text, "Noted; I will keep to that.") for n, (text, _) in enumerate(OPENING, 1)]
    makers = {"code": _code, "trace": _trace, "test_log": _test_log}
    for n in range(len(OPENING) + 1, TURN_COUNT + 1):
        ask, tool, kind = TASKS[(n - len(OPENING) - 1) % len(TASKS)]
        name = rng.choice(WORDS)
        user = ask.format(name=name)
        if n == TURN_COUNT:
            user = f"{CLOSING} {user}"
        output = makers[kind](rng, name)
        event = {"name": tool, "arguments": {"target": name}, "output": output}
        answer = f"Done: looked at {name} ({len(output.splitlines())} lines of {kind})."
        turns.append(Turn(n, user, answer, [event]))
    return turns


@dataclass
class SessionResult:
    naive: list[int]
    tiered: list[int]
    context_ms: list[float]
    lag_ms: list[float]
    background_tokens: int
    checks: list[Check]
    turn45_context: str
    background_by_turn: list[int] = field(default_factory=list)  # sums to background_tokens
    # The turn-45 context's tokens per section (`tokens_by_section`), headings included.
    turn45_sections: dict[str, int] = field(default_factory=dict)


def play(api: Api, say: Any, tokens_now: Any) -> SessionResult:
    say(f"\n== 3. A long development session: {TURN_COUNT} turns, project {PROJECT}")
    turns = script()
    before = sum(tokens_now().values())

    def background() -> int:
        """The workers' LLM tokens since the session began."""
        return sum(tokens_now().values()) - before

    naive, tiered, context_ms, lag_ms, ctx, so_far = _record_all(api, say, turns, background)

    def trimmed() -> dict[str, Any] | None:
        view = _view(api)
        return view if view["turns_total"] == TURN_COUNT and view["turn_count"] <= 10 else None

    view = wait_until("the summary worker to keep the buffer within its trigger", trimmed)
    total = background()
    # Per turn: what the workers used while it was played; the last turn also gets
    # what they used until the buffer was trimmed.
    so_far[-1] = total
    by_turn = [b - a for a, b in zip([0, *so_far], so_far, strict=False)]
    turn45 = ctx["system_instruction"]
    checks = _checks(view, turn45)
    say(
        f"  the summary worker folded {view['folded_turn_count']} turns into summary version "
        f"{view['summary']['version']}; {view['turn_count']} turns left in the buffer"
    )
    sections = ctx["tokens_by_section"]
    return SessionResult(
        naive, tiered, context_ms, lag_ms, total, checks, turn45, by_turn, sections
    )


def _record_all(
    api: Api, say: Any, turns: list[Turn], background: Any
) -> tuple[list[int], list[int], list[float], list[float], dict[str, Any], list[int]]:
    """Each turn as an agent plays it: read the context for it, then record it.
    Returns the prompt tokens of every turn, naive and tiered, the context reads'
    milliseconds, the memory lags of the measured turns, the last context, and the
    workers' LLM tokens so far after each turn."""
    naive, tiered, context_ms, so_far = [], [], [], []
    recorded: dict[int, datetime] = {}  # the measured turns: when each was recorded
    history = 0  # tokens of every earlier turn, verbatim
    ctx: dict[str, Any] = {}
    for turn in turns:
        if turn.n == TURN_COUNT:
            # The turn relies on the opening rules: they are memories by now.
            for n in range(1, len(OPENING) + 1):
                _wait_memory(api, turns[n - 1])
        ctx, took = api.timed(
            "POST",
            "/v1/context",
            json={
                "user_id": USER,
                "session_id": SESSION,
                "project_id": PROJECT,
                "query": turn.user,
            },
        )
        message = estimate_tokens(turn.user)
        naive.append(history + message)
        tiered.append(estimate_tokens(ctx["system_instruction"]) + message)
        context_ms.append(took)
        body = {
            "user_id": USER,
            "project_id": PROJECT,
            "turn_id": f"t{turn.n:02d}",
            "user": turn.user,
            "assistant": turn.assistant,
            "tool_events": turn.tool_events,
        }
        recorded[turn.n] = datetime.now(UTC)
        api.record(SESSION, body)
        history += estimate_tokens(turn.rendered())
        so_far.append(background())
        if turn.n % 5 == 0:
            say(
                f"  turn {turn.n:2d}: prompt tokens naive {naive[-1]:>7,}  tiered {tiered[-1]:>5,}"
                f"  (context read {took:.0f} ms)"
            )
    api.flush(SESSION, USER)
    say("  the session ends: the agent flushes it")
    measured = [*range(1, len(OPENING) + 1), TURN_COUNT]
    lag_ms = [_wait_memory(api, turns[n - 1], recorded[n]) for n in measured]
    return naive, tiered, context_ms, lag_ms, ctx, so_far


def _checks(view: dict[str, Any], turn45: str) -> list[Check]:
    missing = [phrase for _text, phrase in OPENING if phrase and phrase not in turn45]
    return [
        check(
            "rolling summary created and buffer trimmed",
            view["summary"]["version"] >= 1 and view["turn_count"] <= 10,
            f"summary version >= 1 and at most 10 of {TURN_COUNT} turns left in the buffer",
            f"version {view['summary']['version']}, {view['turn_count']} turns in the buffer, "
            f"{view['folded_turn_count']} folded",
        ),
        check(
            "every rule stated in turns 1-5 is in the context of turn 45",
            not missing,
            "; ".join(p for _t, p in OPENING if p),
            f"missing: {missing}" if missing else "all present",
        ),
    ]


def _view(api: Api) -> dict[str, Any]:
    return api.call("GET", f"/v1/sessions/{SESSION}", params={"user_id": USER})


def _wait_memory(api: Api, turn: Turn, since: datetime | None = None) -> float:
    """Wait until `turn`'s memory is in the live view; milliseconds from `since` (when
    the turn was recorded) until the memory was written (its creation time)."""
    key = (turn.user if turn.n <= len(OPENING) else CLOSING).split()[-1].rstrip(".")

    def found() -> dict[str, Any] | None:
        for scope in ({"project_id": PROJECT}, {"scope": "global"}):
            for memory in api.memories(USER, **scope):
                if key in memory["text"]:
                    return memory
        return None

    memory = wait_until(f"the memory of turn {turn.n}", found)
    if since is None:
        return 0.0
    written = datetime.fromisoformat(memory["created_at"].replace("Z", "+00:00"))
    return max(0.0, (written - since).total_seconds() * 1000)
