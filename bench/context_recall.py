"""Context recall benchmark: how often the context an agent gets carries the
evidence of its question, at several budgets, beside what the archive search
finds in its top 10, and what the recalled turns cost the context's latency.

For each embedding provider asked for, in one run: a fresh local stack (Postgres,
Valkey, the Pub/Sub emulator, the API and the extraction worker, as `agent-memory
up` starts them) with the provider, and the conversations of
`bench/context_recall_data.py` recorded through the API as an agent records them
(each conversation one user, its sessions one after another, each naming the one
before and flushed at its end), archived and extracted by the worker with the
`offline` model. Then, for every question, in a new session of its user and
with the question's `asked_at`:

- `POST /v1/context` at each budget (500, 1,000, 2,000 and 4,000 tokens);
- the same at 2,000 tokens without recalled turns and long-term summaries (what
  the context held before it recalled turns: the session, rules and memories);
- `POST /v1/archive:search` with k 10 (the period the question names first).

Context recall of a question is the share of its evidence turns the context
carries: as a recalled turn, or as the source of a memory, rule or long-term
summary it holds. Archive recall@10 is the share in the search's top 10. The
figures are means over the questions with evidence; the never-said questions
(no evidence) report the tokens the context spends on them. Latency is the
client's wall time of each 2,000-token context, with and without recalled turns,
asked in alternating order, sequentially.

Targets, per provider: context recall at 2,000 tokens at least 0.9x archive
recall@10; the context's p99 at most 1.5x its p99 without recalled turns.

    .venv/bin/python bench/context_recall.py [--providers hash,e5] [--conversations 4]

`e5` needs the `e5` extra (make installs it); `AM_E5_THREADS` sets its threads.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from bench.common import MachineTime, bench_stack, describe_machine, percentile  # noqa: E402
from bench.context_recall_data import KINDS, NEVER_SAID, dataset  # noqa: E402
from shared.client import AsyncMemoryClient  # noqa: E402
from shared.waiting import poll  # noqa: E402

BUDGETS = (500, 1000, 2000, 4000)
MEASURED = 2000  # the budget of the targets and of the latency
DIMENSIONS = {"hash": 768, "e5": 384}
RECALL_TARGET = 0.9  # context recall at MEASURED against archive recall@10
P99_TARGET = 1.5  # the context's p99 against its p99 without recalled turns
BEFORE = {"recalled_turns": 0, "long_term_summaries": 0}
WARM_UP = 10  # contexts asked before any is timed


def user_of(prefix: str, conversation_id: str) -> str:
    return f"{prefix}-{conversation_id}"


async def record(api_url: str, key: str, data: dict, prefix: str) -> int:
    """Every conversation through the API, its user's sessions one after another,
    all users at once; each session flushed at its end. The turns recorded."""

    async def conversation(client: AsyncMemoryClient, conv: dict) -> int:
        user, previous, count = user_of(prefix, conv["conversation_id"]), "", 0
        for session in conv["sessions"]:
            session_id = f"{user}-{session['session_id']}"
            for turn in session["turns"]:
                await client.record_turn(
                    session_id,
                    user,
                    turn["user"],
                    turn["assistant"],
                    prev_session_id=previous or None,
                    turn_id=turn["turn_id"],
                    created_at=turn["created_at"],
                )
                count += 1
            await client.flush_session(session_id, user)
            previous = session_id
        return count

    async with AsyncMemoryClient(api_url, api_key=key, timeout=60.0, retries=5) as client:
        counts = await asyncio.gather(*(conversation(client, c) for c in data["conversations"]))
    return sum(counts)


def drained(database_url: str, prefix: str, turns: int, timeout: float) -> dict[str, int]:
    """Wait until every turn is archived and no window waits; the counts then."""
    like = f"{prefix}-%"

    def counts() -> dict[str, int]:
        with psycopg.connect(database_url, autocommit=True) as db:
            (archived,) = db.execute(
                "SELECT count(*) FROM episodes WHERE user_id LIKE %s", (like,)
            ).fetchone()
            (waiting,) = db.execute(
                "SELECT count(*) FROM extraction_pending WHERE user_id LIKE %s", (like,)
            ).fetchone()
            (memories,) = db.execute(
                "SELECT count(*) FROM memories WHERE user_id LIKE %s AND valid_to IS NULL", (like,)
            ).fetchone()
        return {"archived": archived, "waiting": waiting, "memories": memories}

    def done() -> dict[str, int] | None:
        found = counts()
        return found if found["archived"] >= turns and found["waiting"] == 0 else None

    return poll(done, timeout, f"{turns} turns archived and extracted", interval=1.0)


def carried(context: dict[str, Any]) -> set[str]:
    """The turn ids a context carries: recalled, or the source of an item it holds."""
    turns = {t["turn_id"] for t in context["recalled_turns"]}
    for name in ("pinned_rules", "memories", "long_term_summaries"):
        for item in context[name]:
            turns.update(s["turn_id"] for s in item["sources"])
    return turns


def share(evidence: list[str], found: set[str]) -> float:
    return len(set(evidence) & found) / len(evidence)


class Asker:
    """One user's questions over one keep-alive connection, each call timed."""

    def __init__(self, api_url: str, key: str) -> None:
        headers = {"authorization": f"Bearer {key}"}
        self.http = httpx.Client(base_url=api_url, headers=headers, timeout=60.0)

    def post(self, path: str, body: dict) -> tuple[dict, float]:
        started = time.perf_counter()
        answer = self.http.post(path, json=body)
        took = (time.perf_counter() - started) * 1000
        if answer.status_code != 200:
            raise SystemExit(f"{path} answered {answer.status_code}: {answer.text}")
        return answer.json(), took


def question_body(prefix: str, n: int, q: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The user who asks the `n`-th question `q`, and the context request asking it
    (in a session of its own)."""
    user = user_of(prefix, q["conversation_id"])
    body = {
        "user_id": user,
        "session_id": f"{user}-ask-{n}",
        "query": q["question"],
        "asked_at": q["asked_at"],
    }
    return user, body


def ask(api_url: str, key: str, data: dict, prefix: str, rounds: int) -> dict[str, Any]:
    """Every question, as the module's docstring says; per question its figures, and
    the two 2,000-token contexts' latencies over `rounds` passes of the questions."""
    asker = Asker(api_url, key)
    rows: list[dict[str, Any]] = []
    latency: dict[str, list[float]] = {"context": [], "before": []}
    for n, q in enumerate(data["questions"]):
        user, body = question_body(prefix, n, q)
        row: dict[str, Any] = {"kind": q["kind"], "evidence": q["evidence"]}
        # Alternate which goes first, so that neither always meets a warmer cache.
        order = ("context", "before") if n % 2 else ("before", "context")
        for which in order:
            extra = {"token_budget": MEASURED} | ({"sections": BEFORE} if which == "before" else {})
            context, took = asker.post("/v1/context", {**body, **extra})
            if n >= WARM_UP:
                latency[which].append(took)
            row[which] = context
        for budget in BUDGETS:
            if budget != MEASURED:
                row[budget] = asker.post("/v1/context", {**body, "token_budget": budget})[0]
        row[MEASURED] = row["context"]
        search = {"user_id": user, "query": q["question"], "k": 10, "asked_at": q["asked_at"]}
        row["archive"] = asker.post("/v1/archive:search", search)[0]
        rows.append(row)
    # More samples of the two latencies, for a steadier p99: every question again.
    for _round in range(1, rounds):
        for n, q in enumerate(data["questions"]):
            body = question_body(prefix, n, q)[1] | {"token_budget": MEASURED}
            order = ("context", "before") if n % 2 else ("before", "context")
            for which in order:
                extra = {"sections": BEFORE} if which == "before" else {}
                latency[which].append(asker.post("/v1/context", {**body, **extra})[1])
    asker.http.close()
    return {"rows": rows, "latency": latency}


def figures(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per reading (the archive's top 10, the context at each budget, the context
    before), recall overall and per kind, and the median tokens."""
    readings: dict[str, Any] = {
        "archive:search recall@10": lambda r: {e["turn_id"] for e in r["archive"]["episodes"]},
        **{f"context, {b:,} tokens": (lambda r, b=b: carried(r[b])) for b in BUDGETS},
        f"context without recalled turns, {MEASURED:,}": lambda r: carried(r["before"]),
    }
    answered = [r for r in rows if r["evidence"]]
    out: dict[str, dict[str, float]] = {}
    for name, found in readings.items():
        recall = {kind: [] for kind in ("all", *KINDS[:-1])}
        for r in answered:
            value = share(r["evidence"], found(r))
            recall["all"].append(value)
            recall[r["kind"]].append(value)
        out[name] = {k: statistics.fmean(v) if v else 0.0 for k, v in recall.items()}
        if name.startswith("context"):
            key = name.split(", ")[1].split(" ")[0].replace(",", "")
            context_of = (
                (lambda r: r["before"]) if "without" in name else (lambda r, k=key: r[int(k)])
            )
            out[name]["tokens"] = statistics.median(context_of(r)["tokens"] for r in rows)
            never = [context_of(r)["tokens"] for r in rows if r["kind"] == NEVER_SAID]
            out[name]["never said tokens"] = statistics.median(never) if never else 0.0
    return out


def report(provider: str, result: dict[str, Any]) -> bool:
    rows, latency = result["asked"]["rows"], result["asked"]["latency"]
    counts = {kind: sum(r["kind"] == kind for r in rows) for kind in KINDS}
    table = figures(rows)
    print(
        f"\n`{provider}` ({DIMENSIONS[provider]} dimensions): {result['turns']:,} turns recorded "
        f"in {result['record_s']:.0f} s, archived and extracted {result['drain_s']:.0f} s later; "
        f"{result['memories']} memories ({result['memories'] / result['turns']:.2f} per turn); "
        f"{len(rows)} questions ({', '.join(f'{n} {k}' for k, n in counts.items())})\n"
    )
    print(
        "| reading | recall | single-hop | multi-hop | temporal | tokens (median) | "
        "never said: tokens (median) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, f in table.items():
        tokens = f"{f['tokens']:.0f}" if "tokens" in f else ""
        never = f"{f['never said tokens']:.0f}" if "tokens" in f else ""
        print(
            f"| {name} | {f['all']:.3f} | {f['single-hop']:.3f} | {f['multi-hop']:.3f} | "
            f"{f['temporal']:.3f} | {tokens} | {never} |"
        )
    archive = table["archive:search recall@10"]["all"]
    context = table[f"context, {MEASURED:,} tokens"]["all"]
    recall_ok = context >= RECALL_TARGET * archive
    p = {w: (percentile(v, 50), percentile(v, 99)) for w, v in latency.items()}
    p99_ratio = p["context"][1] / p["before"][1]
    p99_ok = p99_ratio <= P99_TARGET
    print(
        f"\nrecall target ({provider}): context recall at {MEASURED:,} tokens {context:.3f} >= "
        f"{RECALL_TARGET} x archive recall@10 {archive:.3f} = {RECALL_TARGET * archive:.3f}: "
        f"{'PASS' if recall_ok else 'FAIL'} (x{context / archive:.2f})"
    )
    print(
        f"latency target ({provider}): {MEASURED:,}-token context p50 {p['context'][0]:.1f} ms, "
        f"p99 {p['context'][1]:.1f} ms; without recalled turns p50 {p['before'][0]:.1f} ms, "
        f"p99 {p['before'][1]:.1f} ms ({len(latency['context'])} each); p99 x{p99_ratio:.2f} "
        f"<= x{P99_TARGET}: {'PASS' if p99_ok else 'FAIL'}"
    )
    return recall_ok and p99_ok


def run(provider: str, data: dict, timeout: float, rounds: int) -> dict[str, Any]:
    # The stack's processes take this process's environment (LocalStack).
    os.environ.update(AM_EMBEDDING_PROVIDER=provider, AM_EMBEDDING_DIM=str(DIMENSIONS[provider]))
    prefix = f"cr-{provider}"
    with bench_stack(services=("api", "extraction")) as (stack, endpoints, _settings):
        key = stack.dev_api_key or ""
        started = time.monotonic()
        turns = asyncio.run(record(endpoints.api_url, key, data, prefix))
        recorded = time.monotonic()
        print(f"  {provider}: {turns:,} turns recorded in {recorded - started:.0f} s", flush=True)
        counts = drained(endpoints.database_url, prefix, turns, timeout)
        drain_s = time.monotonic() - recorded
        print(f"  {provider}: archived and extracted {drain_s:.0f} s later", flush=True)
        asked = ask(endpoints.api_url, key, data, prefix, rounds)
    return {
        "turns": turns,
        "record_s": recorded - started,
        "drain_s": drain_s,
        "memories": counts["memories"],
        "asked": asked,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="hash,e5")
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to drain")
    parser.add_argument(
        "--rounds", type=int, default=3, help="passes of the questions timing the latency"
    )
    args = parser.parse_args()
    data = dataset(args.conversations)
    whole, started = MachineTime(), time.monotonic()
    print(
        f"context recall: {len(data['conversations'])} conversations, "
        f"{len(data['questions'])} questions, budgets {', '.join(f'{b:,}' for b in BUDGETS)}",
        flush=True,
    )
    results = {p: run(p, data, args.timeout, args.rounds) for p in args.providers.split(",")}
    passed = [report(provider, result) for provider, result in results.items()]
    print(f"\nwhole run: {time.monotonic() - started:.0f} s; {describe_machine(whole.report())}")
    return 0 if all(passed) else 1


if __name__ == "__main__":
    raise SystemExit(main())
