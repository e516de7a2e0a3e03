"""What the archive search reads for an episode: its search key.

A turn of a conversation often answers a question only together with the turns
around it ("How was it?" / "Loved it, the clay was so calming" answers "what did
she think of the pottery class?"), and its date lives in no turn's words. So
each episode is searched by a key: its own text, the neighbouring turns of the
same session around it (`AM_EPISODE_KEY_NEIGHBOURS` before and after), and
when it was said, in words ("Tuesday 9 May 2023, afternoon", in UTC). The
episode's own text is what the API shows; the rest is its `context`.

The full-text side weighs the episode's own words above its context's (`A` and
`B`, see `shared.db.episodes.EPISODE_TSV`); the vector side embeds the whole key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

# Parts of the day by the hour they start at.
_PARTS = ((5, "morning"), (12, "afternoon"), (17, "evening"), (21, "night"))


def part_of_day(hour: int) -> str:
    name = "night"  # before 5 in the morning
    for start, part in _PARTS:
        if hour >= start:
            name = part
    return name


def when_in_words(at: datetime) -> str:
    """`at` as a person would say it: "Tuesday 9 May 2023, afternoon" (UTC)."""
    at = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
    return f"{at:%A} {at.day} {at:%B %Y}, {part_of_day(at.hour)}"


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    """An episode among its session's neighbouring turns (their texts, in order)."""

    text: str
    at: datetime | None  # None: the key carries no date
    before: Sequence[str] = ()
    after: Sequence[str] = ()

    def context(self) -> str:
        """What the key adds to the episode's own text: when, then the neighbours."""
        return "\n".join([*self._when(), *self.before, *self.after])

    def key(self) -> str:
        """The whole key, as the embedding reads it: when, then the turns in order."""
        return "\n".join([*self._when(), *self.before, self.text, *self.after])

    def _when(self) -> list[str]:
        return [when_in_words(self.at)] if self.at is not None else []


def neighbourhoods(
    texts: Sequence[str], at: Sequence[datetime], width: int, dated: bool
) -> list[Neighbourhood]:
    """Each of a session's turns (`texts`, in order, said at `at`) among its `width`
    neighbouring turns before and after."""
    return [
        Neighbourhood(
            text,
            at[i] if dated else None,
            texts[max(0, i - width) : i],
            texts[i + 1 : i + 1 + width],
        )
        for i, text in enumerate(texts)
    ]
