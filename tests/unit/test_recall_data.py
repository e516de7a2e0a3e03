"""The recall benchmark's generated conversations are as large and as hard as
bench/recall_data.py says, and the same for the same seed."""

import re
from collections import Counter
from datetime import datetime

import pytest

from bench.recall_data import KINDS, generate
from shared.memory.periods import find_period

DATE_WORDS = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|"
    r"december|monday|tuesday|wednesday|thursday|friday|saturday|sunday|spring|summer|"
    r"autumn|winter|(19|20)\d\d)\b",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def data() -> dict:
    return generate()


@pytest.fixture(scope="module")
def turns(data: dict) -> dict[str, dict]:
    return {
        t["turn_id"]: {**t, "session_id": s["session_id"]}
        for c in data["conversations"]
        for s in c["sessions"]
        for t in s["turns"]
    }


def test_the_same_seed_gives_the_same_dataset_and_another_seed_another(data: dict):
    assert generate() == data
    assert generate(seed=8)["questions"] != data["questions"]


def test_ten_long_conversations_and_five_hundred_questions_of_every_kind(data: dict, turns):
    assert len(data["conversations"]) == 10
    for conv in data["conversations"]:
        assert len(conv["sessions"]) >= 20
        assert sum(len(s["turns"]) for s in conv["sessions"]) >= 400
    kinds = Counter(q["kind"] for q in data["questions"])
    assert sum(kinds.values()) >= 500
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 40
    for q in data["questions"]:
        assert q["evidence"] and all(
            e in turns and e.startswith(q["conversation_id"] + "-") for e in q["evidence"]
        )
        if q["kind"] == "multi-hop":
            assert len({turns[e]["session_id"] for e in q["evidence"]}) == 2


def test_no_turn_names_a_date(turns):
    said = [t for t in turns.values() if DATE_WORDS.search(t["user"] + " " + t["assistant"])]
    assert said == []


def test_an_answer_names_nothing_of_its_question_but_the_turn_before_does(data, turns):
    asked = [q for q in data["questions"] if re.match(r"What did \w+ think of the", q["question"])]
    assert len(asked) == 60
    for q in asked:
        hobby = re.search(r"the (.+) class", q["question"]).group(1)
        (answer,) = q["evidence"]
        conv, session, t = answer.rsplit("-", 2)
        before = turns[f"{conv}-{session}-t{int(t[1:]) - 1:02d}"]
        assert hobby not in turns[answer]["user"] + turns[answer]["assistant"]
        assert hobby in before["user"] + before["assistant"]
        # ... and a distractor of another session says it too.
        assert any(
            hobby in x["user"] and x["session_id"] != turns[answer]["session_id"]
            for x in turns.values()
            if x["turn_id"].startswith(conv + "-")
        )


def test_a_period_question_is_told_apart_from_the_same_news_by_its_date_alone(data, turns):
    asked = [q for q in data["questions"] if "cook for the first time" in q["question"]]
    assert len(asked) == 100
    assert sum("last month" in q["question"] for q in asked) > 10
    for q in asked:
        period = find_period(q["question"], datetime.fromisoformat(q["asked_at"]))
        (answer,) = q["evidence"]
        subject = q["question"].split()[2]
        same_news = [
            e
            for other in asked
            if other["question"].split()[2] == subject
            and other["conversation_id"] == q["conversation_id"]
            for e in other["evidence"]
        ]
        assert len(same_news) == 5
        inside = [
            e
            for e in same_news
            if period.start <= datetime.fromisoformat(turns[e]["created_at"]) < period.end
        ]
        assert inside == [answer]
