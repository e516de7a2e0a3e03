"""The moments a read sees (`as_of`, `observed_after`, `observed_before`), as the
memory search, the listing and the context take them: each an RFC 3339 time
with its zone (a time without one is ambiguous, so a 422 naming the field), the
observed range not empty."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, model_validator

from services.api.models import Time
from shared.memory.ranking import TimeFilter


def zoned(value: datetime | None) -> datetime | None:
    """`value` in UTC; a time without a zone is refused."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError("must name its time zone (Z or +hh:mm)")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC
        raise ValueError("is out of range once converted to UTC") from None


ZonedTime = Annotated[Time | None, AfterValidator(zoned)]

AS_OF = (
    "what was true at this moment (valid time): the memories live then, with the text "
    "they had, the facts that held, the turns said by then"
)
OBSERVED_AFTER = "only what was observed (a memory's last change, a turn said) after this time"
OBSERVED_BEFORE = "only what was observed before this time"


def empty_range(after: datetime | None, before: datetime | None) -> bool:
    return after is not None and before is not None and after >= before


def time_filter(
    as_of: datetime | None, after: datetime | None, before: datetime | None
) -> TimeFilter | None:
    if as_of is None and after is None and before is None:
        return None
    return TimeFilter(as_of, after, before)


class TimeFields(BaseModel):
    """`as_of`, `observed_after` and `observed_before` of a request body."""

    as_of: ZonedTime = Field(default=None, description=AS_OF)
    observed_after: ZonedTime = Field(default=None, description=OBSERVED_AFTER)
    observed_before: ZonedTime = Field(default=None, description=OBSERVED_BEFORE)

    @model_validator(mode="after")
    def _not_empty(self) -> TimeFields:
        if empty_range(self.observed_after, self.observed_before):
            raise ValueError("observed_before: must be after observed_after (the range is empty)")
        return self

    def time(self) -> TimeFilter | None:
        return time_filter(self.as_of, self.observed_after, self.observed_before)
