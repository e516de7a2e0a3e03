"""What a read may call an entity (`shared.entities.shown`): the exact name and
aliases for a table of reads that see every mention, some, or none."""

from __future__ import annotations

import pytest

from shared.entities.shown import Alias, shown

DANA = [
    Alias("Dana Lee", "dana lee", "name"),
    Alias("Dana", "dana", "first name"),
    Alias("Dee", "dee", "nickname"),
]


@pytest.mark.parametrize(
    ("surfaces", "hidden", "name", "aliases"),
    [
        # Every mention seen: the entity as it is, derived aliases too.
        (["Dana Lee"], False, "Dana Lee", ["Dana", "Dana Lee", "Dee"]),
        ([], False, "Dana Lee", ["Dana", "Dana Lee", "Dee"]),
        # Some hidden: only what the seen mentions say, compared normalised.
        (["DANA LEE"], True, "Dana Lee", ["Dana Lee"]),
        (["Dana"], True, "Dana", ["Dana"]),
        # The name unsaid: the fullest alias said (most words, then longest).
        (["Dee", "Dana"], True, "Dana", ["Dana", "Dee"]),
        (["dee"], True, "Dee", ["Dee"]),
        # Nothing said that it goes by: no name to give.
        (["Someone"], True, "", []),
        ([], True, "", []),
    ],
)
def test_a_read_is_shown_the_names_its_mentions_say(surfaces, hidden, name, aliases):
    seen = shown("Dana Lee", DANA, surfaces, hidden)
    assert (seen.name, [a.alias for a in seen.aliases]) == (name, aliases)
