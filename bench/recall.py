"""Archive recall benchmark: how many of the turns that answer a question the
archive search ranks in its top k, with each episode searched by its own text
(turn-only keys) and by its contextual key (the turn, two turns before and after
in its session, the session's date in words), each ranked by full text only,
vector only, hybrid (the configured fusion) and the reference fusion (fixed
weights 0.4 and 0.6, k 60), and both fusions searching the period a question
names first - for each embedding provider asked for, in one run.

The dataset is generated from a seed by `bench/recall_data.py` (ten conversations
between two friends, 24 sessions and about 480 turns each, 520 questions:
single-hop, multi-hop and temporal; its docstring says how it is hard). Each
conversation is one user's archive. The turns go through the extraction worker's
repository (`Episodes.archive`, turn-only) into a fresh local Postgres, one
database per provider; the contextual keys are then computed as the backfill
computes them (`Episodes.plan_session` and `key_session`, window 2, dated), the
same keys the worker reaches once a session has moved on. The searches run the archive search's own
statements (`shared.db.search`).

recall@k of a question is the share of its evidence turns in the top k; nDCG@10
weighs each found evidence turn by its rank. The figures are means over the
questions. The rows' ids are made from their names, so that ties (broken by id)
fall the same way in every run. Two targets, per provider, in the same run:

- contextual hybrid recall@10 at least 1.15x turn-only hybrid recall@10;
- fusion: for each kind of key, the hybrid (the configured fusion, with the
  provider's weight) at least the better of full text and vector alone on
  recall@10 and nDCG@10 (less 0.005), and at least the reference fusion on
  recall@25 (fixed weights 0.4 and 0.6 for every query, k 60).

    .venv/bin/python bench/recall.py [--providers hash,e5] [--conversations 10]

`e5` needs the `e5` extra (make installs it); `AM_E5_THREADS` sets its threads.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from pgvector import Vector  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from bench.recall_data import KINDS, generate  # noqa: E402
from services.dev.localstack.postgres import LocalPostgres  # noqa: E402
from services.dev.localstack.process import free_port  # noqa: E402
from shared.config import Settings, load_settings  # noqa: E402
from shared.db.archive_search import search_episodes, search_episodes_within  # noqa: E402
from shared.db.episodes import Episode, Episodes  # noqa: E402
from shared.db.migrate import migrate  # noqa: E402
from shared.db.run import run  # noqa: E402
from shared.embeddings import make_embedder  # noqa: E402
from shared.logging import configure_logging  # noqa: E402
from shared.memory.periods import find_period  # noqa: E402
from shared.memory.ranking import Fusion, Scope  # noqa: E402

KS = (5, 10, 25)
DIMENSIONS = {"hash": 768, "e5": 384}
KEYS = {"turn-only": "turn", "contextual": "ctx"}  # key -> the app its archive is in
ANSWERED = "hybrid + period"  # contextual hybrid, the period a question names first
TOLERANCE = 0.005  # how far under the better single ranking the hybrid may be


def ingest(conn: psycopg.Connection, embedder: Any, data: dict) -> dict[str, float]:
    """Both archives of every conversation; the seconds spent embedding the turns
    (`turn-only`) and keying them (`contextual`: the keys computed, embedded and
    stored)."""
    turns = [
        (conv["conversation_id"], session["session_id"], turn)
        for conv in data["conversations"]
        for session in conv["sessions"]
        for turn in session["turns"]
    ]
    episodes = [
        Episode(
            app="",
            user_id=conv_id,
            project_id="",
            session_id=session_id,
            turn_id=turn["turn_id"],
            event_id=f"00000000-0000-4000-8000-{i:012d}",
            user_text=turn["user"],
            assistant_text=turn["assistant"],
            tool_events=[],
            created_at=datetime.fromisoformat(turn["created_at"]),
        )
        for i, (conv_id, session_id, turn) in enumerate(turns)
    ]
    started = time.perf_counter()
    vectors = embedder.embed([e.text for e in episodes])
    seconds = {"turn-only": time.perf_counter() - started}
    repo = Episodes(conn)
    for app in KEYS.values():
        for episode, vector in zip(episodes, vectors, strict=True):
            repo.archive_locally(
                replace(episode, app=app), lambda _k, v=vector: [Vector(v)], 0, False
            )
    conn.commit()
    started = time.perf_counter()
    for conv_id, session_id in sorted({(e.user_id, e.session_id) for e in episodes}):
        plan = repo.plan_session(KEYS["contextual"], conv_id, session_id, 2, True)
        vectors = embedder.embed(plan.texts) if plan.keys else []
        repo.key_session(KEYS["contextual"], conv_id, session_id, plan, vectors)
    conn.commit()
    seconds["contextual"] = time.perf_counter() - started
    conn.execute(
        "UPDATE episodes SET id = "
        "md5(app || '/' || user_id || '/' || session_id || '/' || turn_id)::uuid"
    )
    conn.commit()
    return seconds


def rank(conn, question: dict, vector: Any, app: str, fusion: Fusion, period: bool) -> list[str]:
    """The turn ids of the top max(KS) hits for `question`."""
    scope = Scope(app, question["conversation_id"], "")
    found = period and find_period(
        question["question"], datetime.fromisoformat(question["asked_at"])
    )
    k = max(KS)
    if found:
        steps = search_episodes_within(
            scope, question["question"], vector, k, fusion, found.start, found.end
        )
    else:
        steps = search_episodes(scope, question["question"], vector, k, fusion)
    # A ranking with weight 0 still lists its rows, at score 0: not found.
    return [fields["turn_id"] for fields, ranked in run(conn, steps) if ranked.score > 0]


def scores(ranked: list[str], evidence: set[str]) -> dict[str, float]:
    out = {f"recall@{k}": len(evidence & set(ranked[:k])) / len(evidence) for k in KS}
    dcg = sum(1 / math.log2(i + 2) for i, turn in enumerate(ranked[:10]) if turn in evidence)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(evidence), 10)))
    out["nDCG@10"] = dcg / ideal
    return out


def measure(conn, embedder: Any, data: dict, configured: Fusion) -> dict[str, Any]:
    questions = data["questions"]
    vectors = [Vector(v) for v in embedder.embed_queries([q["question"] for q in questions])]
    weights = {
        "full text": replace(configured, vector_weight=0.0, text_weight=1.0, entity_weight=0.0),
        "vector": replace(configured, vector_weight=1.0, text_weight=0.0, entity_weight=0.0),
        "hybrid": configured,  # with the entity ranking, as configured
        "reference": replace(
            configured, vector_weight=0.4, text_weight=0.6, k=60, top=0, entity_weight=0.0
        ),
    }
    rankings = [(key, ranker, False) for key in KEYS for ranker in weights]
    rankings += [("contextual", "hybrid", True), ("contextual", "reference", True)]
    results: dict[str, Any] = {}
    for key, ranker, period in rankings:
        name = f"{ranker} + period" if period else f"{key} {ranker}"
        per_question = [
            scores(
                rank(conn, q, v, KEYS[key], weights[ranker], period),
                set(q["evidence"]),
            )
            for q, v in zip(questions, vectors, strict=True)
        ]
        figures = {
            m: round(sum(s[m] for s in per_question) / len(questions), 3) for m in per_question[0]
        }
        figures["recall@10 by kind"] = {
            kind: round(
                sum(
                    s["recall@10"]
                    for s, q in zip(per_question, questions, strict=True)
                    if q["kind"] == kind
                )
                / max(1, sum(q["kind"] == kind for q in questions)),
                3,
            )
            for kind in KINDS
        }
        results[name] = figures
    turn_only = results["turn-only hybrid"]["recall@10"]
    results["ratio"] = {
        name: round(results[name]["recall@10"] / turn_only, 3) if turn_only else None
        for name in ("contextual hybrid", ANSWERED)
    }
    results["fusion target"] = fusion_target(results)
    return results


def fusion_target(results: dict[str, Any]) -> dict[str, Any]:
    """Per kind of key, each of the fusion's checks: the hybrid's figure, the
    least it may be, and whether it is."""
    checks = {}
    for key in KEYS:
        hybrid, reference = results[f"{key} hybrid"], results[f"{key} reference"]
        singles = [results[f"{key} full text"], results[f"{key} vector"]]
        least = {
            m: round(max(s[m] for s in singles) - TOLERANCE, 3) for m in ("recall@10", "nDCG@10")
        }
        least["recall@25"] = reference["recall@25"]
        checks[key] = {
            m: {"hybrid": hybrid[m], "least": bound, "met": hybrid[m] >= bound}
            for m, bound in least.items()
        }
    met = all(c["met"] for checks_of_key in checks.values() for c in checks_of_key.values())
    return {"checks": checks, "met": met}


def report(provider: str, dim: int, ingest_s: dict[str, float], results: dict[str, Any]) -> None:
    print(
        f"\nembeddings: {provider} ({dim} dimensions); embedding the turns "
        f"{ingest_s['turn-only']:.0f} s, computing, embedding and storing the contextual "
        f"keys {ingest_s['contextual']:.0f} s"
    )
    metrics = [f"recall@{k}" for k in KS] + ["nDCG@10"]
    print(
        f"{'ranking':<24}"
        + "".join(f"{m:>11}" for m in metrics)
        + "".join(f"{k:>12}" for k in KINDS)
    )
    for name, figures in results.items():
        if name in ("ratio", "fusion target"):
            continue
        by_kind = figures["recall@10 by kind"]
        print(
            f"{name:<24}"
            + "".join(f"{figures[m]:>11.3f}" for m in metrics)
            + "".join(f"{by_kind[k]:>12.3f}" for k in KINDS)
        )
    for name, ratio in results["ratio"].items():
        verdict = "meets" if ratio is not None and ratio >= 1.15 else "misses"
        print(f"{name} / turn-only hybrid recall@10: {ratio} ({verdict} the 1.15x target)")
    target = results["fusion target"]
    for key, checks in target["checks"].items():
        print(
            f"fusion, {key}: "
            + "; ".join(
                f"{m} {c['hybrid']:.3f} {'>=' if c['met'] else '<'} {c['least']:.3f}"
                for m, c in checks.items()
            )
        )
    print(f"fusion target ({provider}): {'PASS' if target['met'] else 'FAIL'}")


@contextmanager
def scratch_postgres(prefix: str) -> Iterator[LocalPostgres]:
    """A Postgres of the benchmark's own in a temporary folder, removed after."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    postgres = LocalPostgres(folder, free_port(), folder / "logs", fast=True)
    try:
        postgres.start()
        yield postgres
    finally:
        postgres.process.stop(10)
        shutil.rmtree(folder, ignore_errors=True)


def provider_database(
    postgres: LocalPostgres, name: str, provider: str, **overrides: Any
) -> Settings:
    """A new database `name` on `postgres`, migrated for `provider`'s embeddings: its
    settings (no Valkey, no query cache; `overrides` on top)."""
    with psycopg.connect(postgres.admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    settings = load_settings(
        database_url=postgres.admin_url.rsplit("/", 1)[0] + f"/{name}",
        valkey_url=None,
        embedding_provider=provider,
        embedding_dim=DIMENSIONS[provider],
        query_cache_seconds=0,
        **overrides,
    )
    migrate(settings.database_url, settings.embedding_dim)
    return settings


def add_corpus_options(parser: argparse.ArgumentParser) -> None:
    """The options of the recall benchmarks: the providers, and the corpus generated."""
    parser.add_argument("--providers", default="hash", help="comma separated: hash, e5")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)


def chosen_providers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The providers `--providers` names; a usage error for one it does not know."""
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = [p for p in providers if p not in DIMENSIONS]
    if unknown:
        parser.error(f"--providers: unknown provider {', '.join(unknown)} (hash, e5)")
    return providers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_options(parser)
    args = parser.parse_args()
    providers = chosen_providers(parser, args)
    data = generate(args.seed, args.conversations)
    turns = sum(len(s["turns"]) for c in data["conversations"] for s in c["sessions"])
    print(
        f"{data['name']}: {len(data['conversations'])} conversations, {turns} turns, "
        f"{len(data['questions'])} questions"
    )
    configure_logging("console", "WARNING")
    summary: dict[str, Any] = {}
    with scratch_postgres("agent-memory-recall-") as postgres:
        for provider in providers:
            settings = provider_database(postgres, f"recall_{provider}", provider)
            embedder = make_embedder(settings)
            with psycopg.connect(settings.database_url) as conn:
                register_vector(conn)
                ingest_s = ingest(conn, embedder, data)
                results = measure(conn, embedder, data, Fusion.from_settings(settings))
            report(provider, settings.embedding_dim, ingest_s, results)
            summary[provider] = {
                "ingest_seconds": {k: round(v, 1) for k, v in ingest_s.items()},
                **results,
            }
    print(json.dumps(summary, indent=2))
    # Exit 1 when a provider misses the fusion target, as the other benchmarks do.
    return 0 if all(r["fusion target"]["met"] for r in summary.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
