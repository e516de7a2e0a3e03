"""Entity ranking benchmark: the archive recall benchmark's questions (single-hop,
multi-hop, temporal: `bench/recall_data.py`) and a connected-memory set of this
benchmark's own (`bench/entity_recall_data.py`: people, their relations and
facts that change between sessions), each ranked by the configured hybrid
fusion without the entity ranking and with it, side by side in one run, for
each embedding provider asked for.

The turns are archived by the extraction worker's repository with their
contextual keys (as `bench/recall.py` does), which also links each turn to the
entities it names; the searches run the archive search's own statement. Printed:
recall@10 and nDCG@10 overall and recall@10 by kind, the entity ranking alone,
and the targets: multi-hop recall@10 with the entity ranking at least 4/3 of
without, overall recall@10 not lower (less 0.005), and the fusion with it at
least its best single ranking (full text, vector, entity) on recall@10 and
nDCG@10. (nDCG@10 with and without is printed, not a target: an entity the
question names lifts every turn that names it, the answer's neighbours too.)

    .venv/bin/python bench/entity_recall.py [--providers hash,e5] [--conversations 10]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from pgvector import Vector  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from bench import entity_recall_data  # noqa: E402
from bench.recall import (  # noqa: E402
    KEYS,
    TOLERANCE,
    add_corpus_options,
    chosen_providers,
    ingest,
    provider_database,
    rank,
    scores,
    scratch_postgres,
)
from bench.recall_data import generate  # noqa: E402
from shared.embeddings import make_embedder  # noqa: E402
from shared.logging import configure_logging  # noqa: E402
from shared.memory.ranking import Fusion  # noqa: E402

KINDS = ("single-hop", "multi-hop", "temporal")
METRICS = ("recall@10", "nDCG@10")
GAIN = 4 / 3  # multi-hop recall@10 with the entity ranking / without, at least


def rankings(configured: Fusion, weights: tuple[float, ...] = ()) -> dict[str, Fusion]:
    """The rankings compared, and the hybrid with each entity weight of `weights`
    beside them (rows to read, not targets)."""
    with_entities = configured
    return {
        "full text": replace(configured, vector_weight=0.0, text_weight=1.0, entity_weight=0.0),
        "vector": replace(configured, vector_weight=1.0, text_weight=0.0, entity_weight=0.0),
        "entity": replace(configured, vector_weight=0.0, text_weight=0.0, entity_weight=1.0),
        "hybrid without entities": replace(configured, entity_weight=0.0),
        "hybrid with entities": with_entities,
        **{f"with entity weight {w:g}": replace(configured, entity_weight=w) for w in weights},
    }


def measure(
    conn: psycopg.Connection,
    embedder: Any,
    data: dict,
    configured: Fusion,
    weights: tuple[float, ...] = (),
) -> dict:
    questions = data["questions"]
    vectors = [Vector(v) for v in embedder.embed_queries([q["question"] for q in questions])]
    results: dict[str, Any] = {}
    for name, fusion in rankings(configured, weights).items():
        per_question = [
            scores(rank(conn, q, v, KEYS["contextual"], fusion, False), set(q["evidence"]))
            for q, v in zip(questions, vectors, strict=True)
        ]
        figures: dict[str, Any] = {
            m: round(sum(s[m] for s in per_question) / len(questions), 3) for m in METRICS
        }
        for m in METRICS:
            figures[f"{m} by kind"] = {
                kind: round(sum(s[m] for s in of_kind) / len(of_kind), 3)
                for kind in KINDS
                if (
                    of_kind := [
                        s for s, q in zip(per_question, questions, strict=True) if q["kind"] == kind
                    ]
                )
            }
        results[name] = figures
    results["targets"] = targets(results)
    return results


def targets(results: dict[str, Any]) -> dict[str, Any]:
    without, with_ = results["hybrid without entities"], results["hybrid with entities"]
    hop_without = without["recall@10 by kind"]["multi-hop"]
    hop_with = with_["recall@10 by kind"]["multi-hop"]
    checks = {
        "multi-hop gain": {
            "value": round(hop_with / hop_without, 3) if hop_without else None,
            "least": round(GAIN, 3),
            "met": hop_with >= GAIN * hop_without,
        }
    }
    checks["overall recall@10"] = {
        "value": with_["recall@10"],
        "least": round(without["recall@10"] - TOLERANCE, 3),
        "met": with_["recall@10"] >= without["recall@10"] - TOLERANCE,
    }
    for m in METRICS:
        best = max(results[r][m] for r in ("full text", "vector", "entity"))
        checks[f"fusion {m} vs best single"] = {
            "value": with_[m],
            "least": round(best - TOLERANCE, 3),
            "met": with_[m] >= best - TOLERANCE,
        }
    return {"checks": checks, "met": all(c["met"] for c in checks.values())}


def report(provider: str, results: dict[str, Any]) -> None:
    print(f"\nembeddings: {provider}")
    print(
        f"{'ranking':<26}"
        + "".join(f"{m:>11}" for m in METRICS)
        + "".join(f"{m[:-3] + ' ' + k[:6]:>14}" for m in METRICS for k in KINDS)
    )
    for name, figures in results.items():
        if name == "targets":
            continue
        print(
            f"{name:<26}"
            + "".join(f"{figures[m]:>11.3f}" for m in METRICS)
            + "".join(f"{figures[f'{m} by kind'][k]:>14.3f}" for m in METRICS for k in KINDS)
        )
    for name, check in results["targets"]["checks"].items():
        sign = ">=" if check["met"] else "<"
        print(f"{name}: {check['value']} {sign} {check['least']}")
    print(f"entity targets ({provider}): {'PASS' if results['targets']['met'] else 'FAIL'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_options(parser)
    parser.add_argument("--entity-weight", type=float, default=None)
    parser.add_argument(
        "--compare-entity-weights",
        default="",
        help="comma separated: the hybrid with each of these entity weights too, in the same run",
    )
    args = parser.parse_args()
    weights = tuple(float(w) for w in args.compare_entity_weights.split(",") if w)
    providers = chosen_providers(parser, args)
    data = generate(args.seed, args.conversations)
    own = entity_recall_data.generate(args.seed, args.conversations)
    data = {
        "conversations": data["conversations"] + own["conversations"],
        "questions": data["questions"] + own["questions"],
    }
    turns = sum(len(s["turns"]) for c in data["conversations"] for s in c["sessions"])
    questions = len(data["questions"])
    print(f"{len(data['conversations'])} conversations, {turns} turns, {questions} questions")
    configure_logging("console", "WARNING")
    summary: dict[str, Any] = {}
    with scratch_postgres("agent-memory-entity-recall-") as postgres:
        for provider in providers:
            overrides: dict[str, Any] = {}
            if args.entity_weight is not None:
                overrides["search_entity_weight"] = args.entity_weight
            settings = provider_database(postgres, f"entities_{provider}", provider, **overrides)
            embedder = make_embedder(settings)
            with psycopg.connect(settings.database_url) as conn:
                register_vector(conn)
                ingest(conn, embedder, data)
                results = measure(conn, embedder, data, Fusion.from_settings(settings), weights)
            report(provider, results)
            summary[provider] = results
    print(json.dumps(summary, indent=2))
    return 0 if all(r["targets"]["met"] for r in summary.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
