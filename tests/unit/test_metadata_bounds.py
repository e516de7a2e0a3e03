"""A memory's metadata bounds (`shared.memory.metadata.checked`), which the API,
imports, the extraction config and the console all apply: a lone surrogate (JSON
`"\\ud800"`, which no store can take) is refused where it is, as a NUL is."""

from __future__ import annotations

import json

import pytest

from services.console import inputs
from services.console.access import Refused
from shared.memory.metadata import checked


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": "\ud800"}, "a: must be valid Unicode (it contains a lone surrogate)"),
        ({"a": {"b": ["x", "\udfff"]}}, "a.b[1]: must be valid Unicode"),
        ({"a": "x\x00"}, "a: must not contain NUL characters"),
    ],
)
def test_a_text_no_store_takes_is_refused_where_it_is(value, message):
    with pytest.raises(ValueError) as refused:
        checked(value)
    assert str(refused.value).startswith(message)


def test_the_console_names_the_field_and_the_part():
    typed = json.dumps({"team": "\ud800"})  # the escape as a form would carry it
    with pytest.raises(Refused) as refused:
        inputs.metadata({"metadata": typed}, "metadata")
    assert str(refused.value) == (
        "metadata: team: must be valid Unicode (it contains a lone surrogate)"
    )
