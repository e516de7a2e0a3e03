"""Extraction quality on a labelled set of the project's own: what each LLM provider
extracts from conversations, and what its consolidation decides, against labels.

The set (`bench/data/extraction_set_dev.json`, `..._held_out.json`) holds 160 turns
of 20 sessions of five users, each turn labelled with the memories it states and
the category it is of: preferences, facts, rules, changed facts, facts stated
across two turns, revocations, restatements of what a memory holds, and turns
that must give nothing: small talk, questions, statements by the assistant. The
`offline` provider was improved against the dev part only; the held-out part (two
users of their own) is reported apart and is what its target is measured on.

How a provider is run, as the extraction worker runs it: each session's turns in
windows of `--window` turns (the default of `AM_EXTRACTION_WINDOW_TURNS`), the
turns the worker's filter skips (`shared.memory.worth`) never sent; one
extraction call per window, then one consolidation call for the window's
candidates, each weighed against its user's live memories of the same scope and
project, the `AM_CONSOLIDATION_NEIGHBOURS` (5) sharing most words with it, in a
store kept in memory (CREATED adds, UPDATED rewrites its target, DELETED retires
it, NONE does nothing).

The matching rule: an extracted memory matches a label of a turn of its window
when its text holds every term of the label's `about` (case-folded, on word
boundaries, a plural `s` or `es` allowed; "a|b" holds when either does) and, where
the label names a scope, the memory has that scope. Each label and each memory
match at most once, in the order said. Precision: memories that match a label
over memories extracted; recall: labels matched over labels. Consolidation
accuracy, over the labels that were matched: the decision's action is the
label's (CREATED unless it says UPDATED or NONE), and an UPDATED targets the
memory of the label it `replaces`. Memories per turn: extracted memories over
turns; model tokens per turn: the extraction and consolidation calls' input and
output tokens over turns (the `offline` provider counts what a model's prompt and
answer of the same task would hold).

Providers: `offline` always; `gemini` when `AM_GEMINI_API_KEY` or a Vertex AI
project (`GOOGLE_CLOUD_PROJECT`) is set, `openai` when `AM_OPENAI_BASE_URL` is
set; `--providers` names others. Target: `offline` recall >= 0.6 at precision >=
0.8 on the held-out part (printed PASS or FAIL; exit 1 on FAIL).

    .venv/bin/python bench/extraction_quality.py [--providers offline,openai] [--window 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.config import Settings, load_settings  # noqa: E402
from shared.llm import (  # noqa: E402
    LLM,
    Action,
    ExistingMemory,
    ExtractionInput,
    ExtractionTurn,
    Found,
    OfflineLLM,
    Usage,
    Weighing,
    make_llm,
)
from shared.memory.worth import skip_reason  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
PARTS = ("dev", "held_out")
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TARGET_RECALL, TARGET_PRECISION = 0.6, 0.8
NEIGHBOURS = 5
_WORD = re.compile(r"[\w.+#-]+")


def load_set(data: Path = DATA) -> list[dict[str, Any]]:
    """Every session of the set, dev first, each in the order its user said them."""
    sessions = []
    for part in PARTS:
        sessions += json.loads((data / f"extraction_set_{part}.json").read_text(encoding="utf-8"))
    return sessions


def matches(text: str, scope: str, label: dict[str, Any]) -> bool:
    """The matching rule of the module docstring."""
    if label.get("scope") and label["scope"] != scope:
        return False
    about = label["about"] if isinstance(label["about"], list) else [label["about"]]
    folded = text.casefold()
    return all(
        any(
            re.search(rf"(?<!\w){re.escape(option.casefold())}(?:s|es)?(?!\w)", folded)
            for option in term.split("|")
        )
        for term in about
    )


@dataclass
class Stored:
    id: str
    entity: str
    kind: str
    scope: str
    project: str
    text: str
    labels: set[str] = field(default_factory=set)  # the labels whose memory it is


@dataclass
class Tally:
    turns: int = 0
    extracted: int = 0
    matched_memories: int = 0
    labels: int = 0
    matched_labels: int = 0
    judged: int = 0
    decided_right: int = 0
    usage: Usage = field(default_factory=Usage)
    missed: Counter = field(default_factory=Counter)  # category -> labels missed
    extra: list[str] = field(default_factory=list)  # memories that matched no label

    def row(self) -> dict[str, float]:
        return {
            "precision": self.matched_memories / self.extracted if self.extracted else 1.0,
            "recall": self.matched_labels / self.labels if self.labels else 1.0,
            "consolidation": self.decided_right / self.judged if self.judged else 1.0,
            "judged": self.judged,
            "per_turn": self.extracted / self.turns,
            "tokens": (self.usage.input_tokens + self.usage.output_tokens) / self.turns,
        }


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.casefold()))


def _neighbours(store: list[Stored], found: Found) -> tuple[ExistingMemory, ...]:
    c = found.candidate
    mine = [m for m in store if (m.scope, m.project) == (c.scope, c.project_id)]
    words = _words(c.text)
    mine.sort(key=lambda m: -len(words & _words(m.text)) / (len(words | _words(m.text)) or 1))
    return tuple(
        ExistingMemory(m.id, m.entity, m.kind, m.scope, m.project, m.text)
        for m in mine[:NEIGHBOURS]
    )


def _window_input(
    session: dict[str, Any], prev: str, turns: list[tuple[int, dict]]
) -> ExtractionInput:
    day = T0 + timedelta(days=session["index"])
    return ExtractionInput(
        session["session"],
        prev,
        tuple(
            ExtractionTurn(
                f"{session['session']}-{n}",
                turn.get("project", session.get("project", "")),
                day + timedelta(minutes=n),
                turn["u"],
                turn["a"],
            )
            for n, turn in turns
        ),
    )


def run_provider(llm: LLM, sessions: list[dict[str, Any]], window: int) -> dict[str, Tally]:
    """The tallies of each part of the set for `llm`."""
    tallies = {part: Tally() for part in PARTS}
    stores: dict[str, list[Stored]] = {}
    previous: dict[str, str] = {}
    for index, session in enumerate(sessions):
        session = {**session, "index": index}
        tally = tallies[session["part"]]
        store = stores.setdefault(session["user"], [])
        prev = previous.get(session["user"], "")
        previous[session["user"]] = session["session"]
        numbered = list(enumerate(session["turns"]))
        tally.turns += len(numbered)
        for start in range(0, len(numbered), window):
            chunk = numbered[start : start + window]
            _window(llm, session, prev, chunk, store, tally)
    return tallies


def _window(llm, session, prev, chunk, store: list[Stored], tally: Tally) -> None:
    labels = [(label, turn["c"]) for _n, turn in chunk for label in turn["m"]]
    tally.labels += len(labels)
    sent = [(n, turn) for n, turn in chunk if skip_reason(turn["u"], turn["a"]) is None]
    found: list[Found] = []
    if sent:
        completion = llm.extract(_window_input(session, prev, sent))
        tally.usage += completion.usage
        found = completion.value
    tally.extracted += len(found)
    matched: dict[int, dict[str, Any]] = {}  # found index -> its label
    free = list(range(len(labels)))
    for i, item in enumerate(found):
        for j in free:
            if matches(item.candidate.text, item.candidate.scope, labels[j][0]):
                matched[i] = labels[j][0]
                free.remove(j)
                break
        else:
            tally.extra.append(item.candidate.text)
    tally.matched_memories += len(matched)
    tally.matched_labels += len(matched)
    for j in free:
        tally.missed[labels[j][1]] += 1
    if not found:
        return
    weighings = [Weighing(item.candidate, _neighbours(store, item)) for item in found]
    completion = llm.consolidate(weighings)
    tally.usage += completion.usage
    for i, (item, decision) in enumerate(zip(found, completion.value, strict=True)):
        label = matched.get(i)
        if label is not None:
            tally.judged += 1
            tally.decided_right += _right(decision, label, store)
        _apply(store, item, decision, label)


def _right(decision, label: dict[str, Any], store: list[Stored]) -> bool:
    expected = label.get("action", "CREATED")
    if decision.action != expected:
        return False
    if expected == "UPDATED":
        target = next((m for m in store if m.id == decision.target_id), None)
        return target is not None and label["replaces"] in target.labels
    return True


def _apply(store: list[Stored], item: Found, decision, label: dict[str, Any] | None) -> None:
    c = item.candidate
    tag = {label["id"]} if label and "id" in label else set()
    if decision.action == Action.CREATED:
        store.append(
            Stored(
                f"m{len(store) + 1}-{id(item)}",
                c.entity_name,
                c.kind,
                c.scope,
                c.project_id,
                decision.text,
                tag,
            )
        )
        return
    target = next((m for m in store if m.id == decision.target_id), None)
    if target is None:
        return
    if decision.action == Action.UPDATED:
        target.text = decision.text
        target.labels |= tag
    elif decision.action == Action.DELETED:
        store.remove(target)


def providers(asked: str | None) -> list[str]:
    if asked:
        return [p.strip() for p in asked.split(",") if p.strip()]
    found = ["offline"]
    if os.environ.get("AM_GEMINI_API_KEY") or os.environ.get("GOOGLE_CLOUD_PROJECT"):
        found.append("gemini")
    if os.environ.get("AM_OPENAI_BASE_URL"):
        found.append("openai")
    return found


def make_provider(name: str, settings: Settings) -> LLM:
    if name == "offline":
        return OfflineLLM()
    return make_llm(replace_provider(settings, name))


def replace_provider(settings: Settings, name: str) -> Settings:
    return settings.model_copy(update={"llm_provider": name})


def report(results: dict[str, dict[str, Tally]]) -> list[str]:
    lines = [
        f"{'provider':<9} {'part':<9} {'turns':>5} {'labels':>6} {'precision':>9} {'recall':>6} "
        f"{'consolidation':>13} {'memories/turn':>13} {'tokens/turn':>11}"
    ]
    for name, tallies in results.items():
        for part in PARTS:
            t = tallies[part]
            r = t.row()
            consolidation = f"{r['consolidation']:.2f} ({r['judged']})"
            lines.append(
                f"{name:<9} {part:<9} {t.turns:>5} {t.labels:>6} {r['precision']:>9.2f} "
                f"{r['recall']:>6.2f} {consolidation:>13} {r['per_turn']:>13.2f} "
                f"{r['tokens']:>11.0f}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", help="comma-separated (default: offline and the configured)")
    parser.add_argument("--window", type=int, default=5, help="turns per extraction window")
    parser.add_argument("--misses", action="store_true", help="list what offline missed or added")
    args = parser.parse_args(argv)
    settings = load_settings()
    sessions = load_set()
    results = {
        name: run_provider(make_provider(name, settings), sessions, args.window)
        for name in providers(args.providers)
    }
    turns = sum(len(s["turns"]) for s in sessions)
    print(f"extraction quality: {turns} turns, {len(sessions)} sessions, window {args.window}\n")
    for line in report(results):
        print(line)
    code = 0
    if "offline" in results:
        held = results["offline"]["held_out"].row()
        ok = held["recall"] >= TARGET_RECALL and held["precision"] >= TARGET_PRECISION
        print(
            f"\noffline on the held-out part: recall {held['recall']:.2f} "
            f"(target >= {TARGET_RECALL}) at precision {held['precision']:.2f} "
            f"(target >= {TARGET_PRECISION}): "
            f"{'PASS' if ok else 'FAIL'}"
        )
        code = 0 if ok else 1
        if args.misses:
            for part in PARTS:
                t = results["offline"][part]
                print(f"\n{part}: missed by category {dict(t.missed)}")
                for text in t.extra:
                    print(f"  extra: {text}")
    return code


if __name__ == "__main__":
    sys.exit(main())
