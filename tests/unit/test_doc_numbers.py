"""The numbers docs/ states about retries, windows and limits are the code's: a
setting's default wherever a document names it with its value ("`AM_WRITE_ATTEMPTS`
(6)", "`AM_DB_POOL_SIZE`, 4 by default", "`AM_FIGURES_INTERVAL_SECONDS` 2 s"), and
the constants below wherever a document states them. configuration.md is generated
from the settings (tests/unit/test_readme.py); performance.md records what runs were
measured with, so its settings are the runs' and not checked here."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from services.api.errors import RETRY_AFTER_SECONDS, VALKEY_FULL_RETRY_AFTER_SECONDS
from services.api.memory_models import SearchRequest
from services.dev.localstack.supervision import COMPONENT_BACKOFF_SECONDS, SERVICE_BACKOFF_SECONDS
from services.summary_worker.folding import FoldPolicy
from services.worker import DEFAULT_POOL_SIZE
from shared.bus.admin import DEAD_LETTER_ACK_DEADLINE
from shared.bus.unary_pull import (
    IDLE_PAUSE_SECONDS,
    MAX_IDLE_PAUSE_SECONDS,
    PULL_TIMEOUT_SECONDS,
)
from shared.config import Settings, env_name
from shared.db.pool import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_SECONDS,
    KEEPALIVE_INTERVAL_SECONDS,
    TCP_USER_TIMEOUT_MS,
)
from shared.entities.judging import MOST_LISTED, MOST_PER_NAME
from shared.llm.offline.decomposition import MAX_QUERIES
from shared.memory.context import MIN_HITS, TOKENS_PER_HIT
from shared.memory.metadata import MAX_BYTES as MAX_METADATA_BYTES

DOCS = Path(__file__).resolve().parents[2] / "docs"
WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}

# A setting named with its value: "(6)", "(default 2)", "(2%)", ", 4 by default", " 2 s".
SETTING_VALUE = re.compile(
    r"`(AM_[A-Z0-9_]+)`(?:\s*\((?:default\s+)?|,\s*|\s+)"
    r"(-?[0-9][0-9,]*(?:\.[0-9]+)?)(%|\s*s\b|\)| by default)"
)
FIELDS = {env_name(name): name for name in Settings.model_fields}
# Settings whose default is None and chosen in code: the value the code chooses.
CHOSEN = {"AM_DB_POOL_SIZE": DEFAULT_POOL_SIZE}


def default(name: str) -> float:
    if name in CHOSEN:
        return CHOSEN[name]
    return Settings.model_fields[FIELDS[name]].default


def number(text: str) -> float:
    return WORDS[text] if text in WORDS else float(text.replace(",", ""))


def stated_settings() -> list[tuple[str, int, str, float]]:
    found = []
    for path in sorted(DOCS.glob("*.md")):
        if path.name in ("configuration.md", "performance.md"):
            continue
        text = path.read_text(encoding="utf-8")
        for match in SETTING_VALUE.finditer(text):
            value = number(match[2]) / (100 if match[3] == "%" else 1)
            line = text.count("\n", 0, match.start()) + 1
            found.append((path.name, line, match[1], value))
    return found


def test_every_setting_a_document_states_with_its_value_has_that_default():
    stated = stated_settings()
    assert len(stated) >= 15  # the pattern still reads the documents
    wrong = [
        f"docs/{doc}:{line}: {name} is {value:g} there, {default(name)} in the code"
        for doc, line, name, value in stated
        if name not in FIELDS or value != default(name)
    ]
    assert wrong == []


def _search_k() -> tuple[float, ...]:
    field = SearchRequest.model_fields["k"]
    bounds = {type(m).__name__: m for m in field.metadata}
    return bounds["Ge"].ge, bounds["Le"].le, field.default


# (document, what it states, the value in the code); each must be found in its document.
CONSTANTS: list[tuple[str, str, Callable[[], tuple[float, ...]]]] = [
    (
        "design.md",
        r"one per\s+(\d+) tokens of the budget, at least (\d+)",
        lambda: (TOKENS_PER_HIT, MIN_HITS),
    ),
    (
        "configuration.md",
        r"one per\s+(\d+) tokens of the budget, at least (\d+)",
        lambda: (TOKENS_PER_HIT, MIN_HITS),
    ),
    ("design.md", r"fold lock \((\d+) s", lambda: (FoldPolicy().lock_seconds,)),
    (
        "console.md",
        r"metadata \(a JSON object, at most ([\d,]+) bytes as compact JSON",
        lambda: (MAX_METADATA_BYTES,),
    ),
    ("design.md", r"up to (\w+) single-topic sub-queries", lambda: (MAX_QUERIES,)),
    (
        "design.md",
        r"At most (\d+) entities for a name, (\d+) in one prompt",
        lambda: (MOST_PER_NAME, MOST_LISTED),
    ),
    ("api.md", r"up to (\w+) single-topic sub-queries", lambda: (MAX_QUERIES,)),
    ("api.md", r"k\? \((\d+)–(\d+), default (\d+)\)", _search_k),
    (
        "design.md",
        r"`batch_limit` \(default (\d+)\)",
        lambda: (Settings.model_fields["compaction_batch_limit"].default,),
    ),
    (
        "design.md",
        r"holds `AM_EXTRACTION_WINDOW_TURNS` turns \((\d+)\)",
        lambda: (Settings.model_fields["extraction_window_turns"].default,),
    ),
    (
        "design.md",
        r"k = (\d+), `AM_SEARCH_RRF_K`",
        lambda: (Settings.model_fields["search_rrf_k"].default,),
    ),
    ("design.md", r"same name \(ack deadline\s+(\d+) s\)", lambda: (DEAD_LETTER_ACK_DEADLINE,)),
    (
        "operations.md",
        r"`valkey_full`, the `turn_id` and `event_id`, and `Retry-After: (\d+)`",
        lambda: (VALKEY_FULL_RETRY_AFTER_SECONDS,),
    ),
    ("operations.md", r"`503 overloaded` and `Retry-After: (\d+)`", lambda: (RETRY_AFTER_SECONDS,)),
    (
        "api.md",
        r"`Retry-After` header: (\d+) second, (\d+) for `valkey_full`",
        lambda: (RETRY_AFTER_SECONDS, VALKEY_FULL_RETRY_AFTER_SECONDS),
    ),
    (
        "operations.md",
        r"TCP user timeout of (\d+) s and keepalives \((\d+) s idle, (\d+) probes (\d+) s apart\)",
        lambda: (
            TCP_USER_TIMEOUT_MS / 1000,
            KEEPALIVE_IDLE_SECONDS,
            KEEPALIVE_COUNT,
            KEEPALIVE_INTERVAL_SECONDS,
        ),
    ),
    (
        "local-stack.md",
        r"a service up to (\d+) s apart, a component up to (\d+) s apart",
        lambda: (SERVICE_BACKOFF_SECONDS, COMPONENT_BACKOFF_SECONDS),
    ),
    (
        "operations.md",
        r"with a deadline of (\d+) s, which a saturated CPU does not outlast, and an idle"
        r" worker waits between empty pulls, from ([\d.]+) s up to ([\d.]+) s",
        lambda: (PULL_TIMEOUT_SECONDS, IDLE_PAUSE_SECONDS, MAX_IDLE_PAUSE_SECONDS),
    ),
]


@pytest.mark.parametrize(("doc", "pattern", "code"), CONSTANTS, ids=[c[1] for c in CONSTANTS])
def test_a_constant_a_document_states_is_the_codes(doc, pattern, code):
    text = (DOCS / doc).read_text(encoding="utf-8")
    # A sentence may wrap anywhere: a space of the pattern is any run of white space.
    matches = list(re.finditer(pattern.replace(" ", r"\s+"), text))
    assert matches, f"docs/{doc} no longer states {pattern!r}: update this test"
    for match in matches:
        line = text.count("\n", 0, match.start()) + 1
        stated = tuple(number(group) for group in match.groups())
        assert stated == code(), f"docs/{doc}:{line} states {stated}, the code {code()}"
