"""bench/extraction_quality.py: its labelled set holds what the issue asks for, its
matching rule reads as documented, and a model provider runs it the same way as
the offline one: the `openai` provider against the fake endpoint, whose model
decides as `rules` does, scores exactly what `rules` scores."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import SecretStr

from bench.extraction_quality import PARTS, load_set, matches, run_provider
from shared.config import load_settings
from shared.llm import OfflineLLM, make_llm
from tests.fake_gemini_model import offline_chat
from tests.fake_openai import FakeOpenAI


def test_the_set_has_every_category_and_a_held_out_part_of_its_own_users():
    sessions = load_set()
    turns = [turn for s in sessions for turn in s["turns"]]
    assert len(turns) >= 150
    categories = Counter(turn["c"] for turn in turns)
    assert set(categories) == {
        "preference",
        "fact",
        "rule",
        "change",
        "two_turns",
        "revocation",
        "restatement",
        "small_talk",
        "question",
        "assistant",
    }
    for nothing in ("small_talk", "question", "assistant"):
        assert all(not t["m"] for t in turns if t["c"] == nothing)
    users = {part: {s["user"] for s in sessions if s["part"] == part} for part in PARTS}
    assert users["dev"] and users["held_out"] and not users["dev"] & users["held_out"]
    held_out = sum(len(s["turns"]) for s in sessions if s["part"] == "held_out")
    assert held_out >= 60


@pytest.mark.parametrize(
    ("text", "scope", "label", "expected"),
    [
        ("User prefers Python and Go.", "global", {"about": ["python", "go"]}, True),
        ("User prefers Python and Golang.", "global", {"about": ["python", "go"]}, False),
        ("User takes trains.", "global", {"about": "train"}, True),
        ("Deploys happen before 3 PM.", "project", {"about": ["3pm|3 pm"]}, True),
        ("The region is eu-west-1.", "global", {"about": "eu-west-1", "scope": "project"}, False),
    ],
)
def test_the_matching_rule(text, scope, label, expected):
    assert matches(text, scope, label) is expected


def test_a_model_provider_runs_the_bench_as_the_offline_one_does():
    sessions = load_set()
    offline = run_provider(OfflineLLM(), sessions, 5)
    with FakeOpenAI() as fake:
        fake.defaults["chat"] = offline_chat
        settings = load_settings(
            llm_provider="openai",
            openai_base_url=fake.url,
            openai_api_key=SecretStr("test-key"),
            llm_retry_initial_seconds=0.01,
        )
        model = run_provider(make_llm(settings), sessions, 5)
        calls = len(fake.calls("chat"))
    for part in PARTS:
        a, b = offline[part].row(), model[part].row()
        assert {k: a[k] for k in a if k != "tokens"} == {k: b[k] for k in b if k != "tokens"}
        # The endpoint reported its own usage (the messages' tokens and the answer's).
        assert b["tokens"] > 0
    windows = sum(-(-len(s["turns"]) // 5) for s in sessions)
    assert 0 < calls <= 2 * windows
