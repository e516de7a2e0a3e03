"""The bodies of feedback on a memory (`POST /v1/memories/{id}:feedback`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, WithJsonSchema

from services.api.memory_models import MemoryDetail
from services.api.models import AgentRead, Identifier, RequestBody
from shared.db.feedback import MAX_REASON

Rating = Literal["useful", "not_useful", "wrong"]


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


Reason = Annotated[
    str,
    Field(max_length=MAX_REASON),
    AfterValidator(_no_nul),
    WithJsonSchema(
        {
            "type": "string",
            "maxLength": MAX_REASON,
            "pattern": "^[^\\u0000]*$",
            "description": f"Why, in the caller's words: at most {MAX_REASON} characters, "
            "no NUL characters.",
        }
    ),
]


class FeedbackRequest(RequestBody):
    # No example: one needs a memory (the documented examples are run).

    user_id: Identifier
    agent_id: AgentRead = None
    rating: Rating = Field(
        description="`useful` or `not_useful` weigh the memory in searches and the context; "
        "`wrong` retires it (a rollback brings it back)."
    )
    reason: Reason = ""


class FeedbackView(BaseModel):
    id: int  # its number among all feedback, in the order given
    memory_id: str
    rating: Rating
    reason: str
    source: str = Field(description="who gave it: 'key:<id>' of the caller's API key")
    created_at: str
    restored_at: str | None = Field(
        default=None, description="for `wrong`: when a rollback made the memory live again"
    )


class FeedbackTally(BaseModel):
    """How many callers' latest feedback on the memory is each rating."""

    useful: int
    not_useful: int
    wrong: int


class FeedbackResponse(BaseModel):
    feedback: FeedbackView
    tally: FeedbackTally
    memory: MemoryDetail  # after the feedback: retired (`deleted_at`) when it was wrong
