"""The periods a question names, by the documented rules (shared/memory/periods.py)."""

from datetime import UTC, datetime

import pytest

from shared.memory.periods import find_period

NOW = datetime(2023, 8, 16, 15, 30, tzinfo=UTC)  # a Wednesday


@pytest.mark.parametrize(
    ("question", "phrase", "start", "end"),
    [
        ("What did we do on 9 May 2023?", "on 9 May 2023", "2023-05-09", "2023-05-10"),
        ("on the 9th of May 2023", "on the 9th of May 2023", "2023-05-09", "2023-05-10"),
        ("Where was she on May 9, 2023?", "May 9, 2023", "2023-05-09", "2023-05-10"),
        ("What did she do in May 2023?", "in May 2023", "2023-05-01", "2023-06-01"),
        ("in december of 2022", "in december of 2022", "2022-12-01", "2023-01-01"),
        ("trips in the summer of 2022", "in the summer of 2022", "2022-06-01", "2022-09-01"),
        ("the winter of 2022", "the winter of 2022", "2022-12-01", "2023-03-01"),
        ("What changed during 2022?", "during 2022", "2022-01-01", "2023-01-01"),
        ("What did I eat yesterday?", "yesterday", "2023-08-15", "2023-08-16"),
        ("plans made today", "today", "2023-08-16", "2023-08-17"),
        ("Who called last week?", "last week", "2023-08-07", "2023-08-14"),
        ("this week's meetings", "this week", "2023-08-14", "2023-08-21"),
        ("books read last month", "last month", "2023-07-01", "2023-08-01"),
        ("goals for this year", "this year", "2023-01-01", "2024-01-01"),
        ("Where did he travel last summer?", "last summer", "2022-06-01", "2022-09-01"),
        ("last spring", "last spring", "2023-03-01", "2023-06-01"),
        ("this summer", "this summer", "2023-06-01", "2023-09-01"),
        ("What happened two weeks ago?", "two weeks ago", "2023-07-31", "2023-08-07"),
        ("3 days ago", "3 days ago", "2023-08-13", "2023-08-14"),
        ("a month ago", "a month ago", "2023-07-01", "2023-08-01"),
        ("What did she say last Tuesday?", "last Tuesday", "2023-08-15", "2023-08-16"),
        ("last Wednesday", "last Wednesday", "2023-08-09", "2023-08-10"),
        ("on Wednesday", "on Wednesday", "2023-08-16", "2023-08-17"),
        ("Which class did she take in March?", "in March", "2023-03-01", "2023-04-01"),
        ("Which class did she take in October?", "in October", "2022-10-01", "2022-11-01"),
        # No such day: the month it names.
        ("on the 31st of February 2023", "February 2023", "2023-02-01", "2023-03-01"),
    ],
)
def test_a_named_period_is_read_by_the_rules(question, phrase, start, end):
    period = find_period(question, NOW)
    assert period is not None
    assert period.phrase == phrase
    assert (period.start.isoformat(), period.end.isoformat()) == (
        f"{start}T00:00:00+00:00",
        f"{end}T00:00:00+00:00",
    )


def test_this_winter_in_january_is_the_one_that_began_in_december():
    period = find_period("this winter", datetime(2024, 1, 20, tzinfo=UTC))
    assert period is not None and period.start.date().isoformat() == "2023-12-01"


@pytest.mark.parametrize(
    "question",
    [
        "What is the name of the staging database?",
        "May I ask what the pottery class was like?",
        "the week before the launch",
        "version 2023 of the runtime",
    ],
)
def test_a_question_naming_no_period_has_none(question):
    assert find_period(question, NOW) is None
