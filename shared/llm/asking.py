"""Asking a model for one structured task, the same way for every model provider
(`gemini`, `openai`): each provider is only a `Transport` that sends a `Prompt`
and reads its client's answers and errors.

- A request that fails (429, 5xx, a timeout, no connection) is retried as
  `shared.llm.retrying` says, honouring `Retry-After`; its retries ending on the
  endpoint raise `LLMUnavailable` or `LLMRateLimited`, which the worker holds the
  message for without spending its delivery attempts.
- An answer that is not usable (empty, not JSON, off the schema, an enum value
  or an id the request did not name, cut at the output limit) is counted in
  `agent_memory_llm_invalid_answers_total{provider,purpose,fault}` and asked
  again at once, at most `AM_LLM_ANSWER_RETRIES` times: the model sees its own
  answer and what was wrong with it (an answer cut at the limit is asked again
  shorter, with twice the room). When the retries run out the task raises
  `InvalidAnswer`, a permanent error: the event is dead-lettered with the fault
  and the start of the last answer (`ANSWER_EXCERPT_CHARS`). An invalid answer is
  never read as "no memories".
- Given a `Throttle` (the workers', `AM_LLM_MAX_CALLS_PER_MINUTE`), each request
  first waits for the app's limit.

Every request is counted (`shared.llm.accounting`) with its result and latency,
and its tokens go into the metrics and the task's usage.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import structlog

from shared.config import Settings
from shared.llm import accounting
from shared.llm.base import (
    Completion,
    Fault,
    InvalidAnswer,
    LLMError,
    LLMRateLimited,
    LLMUnavailable,
    MalformedReply,
    Usage,
)
from shared.llm.retrying import Attempt, GiveUp, Refusal, retry_delay

if TYPE_CHECKING:
    from shared.llm.throttle import Throttle

log = structlog.get_logger("agent_memory.llm")

T = TypeVar("T")

# How much of an invalid answer its dead letter's reason holds (a reason is cut at
# 1,000 bytes: the fault and its detail come first).
ANSWER_EXCERPT_CHARS = 300
# An answer cut at the output limit is asked for again with twice the room, up to
# this many times the task's own bound.
_MOST_OUTPUT_GROWTH = 4
_GIVE_UP = GiveUp(LLMError, LLMUnavailable, LLMRateLimited, "no usable reply")


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True)
class Prompt:
    """One structured task as a model request."""

    task: str  # the metrics' purpose label
    system: str
    messages: tuple[ChatMessage, ...]
    schema: dict[str, Any]  # the answer's JSON schema
    max_output_tokens: int


@dataclass(frozen=True)
class Answer:
    text: str
    usage: Usage
    truncated: bool = False  # the model stopped at the output token limit


class Transport(Protocol):
    """A provider's client: one request, and how to read its failures."""

    provider: str  # the metrics' `provider` label

    def send(self, prompt: Prompt) -> Answer:
        """One HTTP request; raises its client's exception when it fails."""
        ...

    def refusal(self, exc: Exception) -> Refusal | None:
        """`exc` read as a failed request, or None when it is no error of the
        client's (then raised as it is)."""
        ...


def ask(
    transport: Transport,
    prompt: Prompt,
    parse: Callable[[Any], T],
    settings: Settings,
    throttle: Throttle | None = None,
) -> Completion[T]:
    """The task's parsed answer, asked as the module says."""
    started = time.monotonic()
    usage = Usage()
    attempt = 0
    invalid = 0
    request = prompt
    while True:
        attempt += 1
        if throttle is not None:
            # Outside the retries: a Valkey error is Valkey's outage. The wait is
            # the limit's, not the endpoint's: the retry window starts later.
            started += throttle.admit(accounting.current_app(), prompt.task)
        try:
            with accounting.timed(transport.provider, prompt.task):
                answer = transport.send(request)
        except Exception as exc:
            refusal = transport.refusal(exc)
            if refusal is None:
                raise
            where = Attempt(prompt.task, attempt, started)
            time.sleep(retry_delay(refusal, exc, where, settings, _GIVE_UP))
            continue
        usage += answer.usage
        accounting.count_tokens(prompt.task, answer.usage.input_tokens, answer.usage.output_tokens)
        try:
            value = parse(read_json(answer))
        except MalformedReply as bad:
            accounting.count_invalid(transport.provider, prompt.task, bad.fault)
            invalid += 1
            if invalid > settings.llm_answer_retries:
                accounting.count_call(prompt.task, accounting.FAILED)
                raise invalid_answer(prompt.task, invalid, bad, answer.text) from bad
            accounting.count_call(prompt.task, accounting.RETRIED)
            log.info(
                "model answer invalid",
                provider=transport.provider,
                task=prompt.task,
                fault=str(bad.fault),
                error=str(bad),
            )
            request = asked_again(prompt, request, answer.text, bad)
            continue
        accounting.count_call(prompt.task, accounting.OK)
        return Completion(value, usage, attempts=attempt)


def read_json(answer: Answer) -> Any:
    """The answer's JSON value; MalformedReply with its fault when there is none."""
    if answer.truncated:
        raise MalformedReply("the answer was cut off at the output token limit", Fault.TRUNCATED)
    text = answer.text.strip()
    if not text:
        raise MalformedReply("the answer was empty", Fault.EMPTY)
    # Some models wrap JSON in a Markdown fence whatever they are told.
    if text.startswith("```") and text.endswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedReply(
            f"not JSON ({exc.msg} at character {exc.pos})", Fault.NOT_JSON
        ) from None


def asked_again(prompt: Prompt, last: Prompt, text: str, bad: MalformedReply) -> Prompt:
    """The request after the invalid answer `text`: the task's own messages, the
    answer, and what was wrong with it (only the latest answer: the request stays
    the size of the first)."""
    if bad.fault is Fault.TRUNCATED:
        feedback = (
            "Your answer was cut off at the output limit. Answer again with the same JSON, "
            "shorter: fewer and shorter texts."
        )
        bound = min(last.max_output_tokens * 2, prompt.max_output_tokens * _MOST_OUTPUT_GROWTH)
    else:
        feedback = (
            f"Your answer is not usable: {bad}. Answer again with JSON only, exactly as the "
            "schema says, using only the values and labels given."
        )
        bound = last.max_output_tokens
    if text.strip():
        messages = (*prompt.messages, ChatMessage("assistant", text), ChatMessage("user", feedback))
    else:  # no empty assistant message (endpoints refuse one): the prompt says it
        *before, final = prompt.messages
        messages = (*before, replace(final, text=f"{final.text}\n\n{feedback}"))
    return replace(last, messages=messages, max_output_tokens=bound)


def invalid_answer(task: str, count: int, bad: MalformedReply, text: str) -> InvalidAnswer:
    """The error of a task whose answers stayed invalid, with the last one's start
    (its whitespace runs made one space, so the reason stays one line)."""
    flat = " ".join(text.split())
    excerpt = flat[:ANSWER_EXCERPT_CHARS]
    if len(flat) > ANSWER_EXCERPT_CHARS:
        excerpt += f"… ({len(flat)} characters)"
    return InvalidAnswer(
        f"{task}: {count} invalid answers from the model, the last {bad.fault}: {bad}; "
        f"it began: {excerpt}",
        bad.fault,
    )
