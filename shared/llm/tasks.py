"""The memory tasks as a model does them, whatever the provider: each task is one
structured request (`shared.llm.asking`) with its instruction, prompt, response
schema and strict parser (`shared.llm.task_prompts`, `shared.llm.extraction_prompts`),
so a `gemini` and an `openai` model are asked the same and read the same.

Tasks (the metrics' `purpose` label): "summarize", and the memory tasks
"compact", "extract", "profile" (fill a profile), "consolidate" and "decompose".
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from shared.config import Settings
from shared.llm import accounting, profile_prompts
from shared.llm import extraction_prompts as write_prompts
from shared.llm import task_prompts as prompts
from shared.llm.asking import ChatMessage, Prompt, Transport, ask
from shared.llm.base import (
    Completion,
    Decision,
    DialogueTurn,
    ExtractionInput,
    Fault,
    Found,
    Weighing,
)

if TYPE_CHECKING:
    from shared.llm.base import ProfileFound
    from shared.llm.throttle import Throttle

T = TypeVar("T")
log = structlog.get_logger("agent_memory.llm")

# Output bounds of the memory tasks (a thinking model's thoughts count too).
EXTRACT_MAX_OUTPUT_TOKENS = 4096
CONSOLIDATE_MAX_OUTPUT_TOKENS = 1024
DECOMPOSE_MAX_OUTPUT_TOKENS = 512
PROFILE_MAX_OUTPUT_TOKENS = 1024  # a value per field at most, a few dozen tokens each


class ModelTasks:
    """The `LLM` of a model provider: its `transport` does the requests."""

    name = "model"
    judges_entities = True

    def __init__(
        self, settings: Settings, transport: Transport, throttle: Throttle | None = None
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.throttle = throttle  # the app's limit of calls; None: no limit

    def summarize(
        self, previous: str, turns: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        return self.generate_json(
            task="summarize",
            system=prompts.summary_instruction(max_tokens),
            prompt=prompts.summary_prompt(previous, turns),
            schema=prompts.SUMMARY_SCHEMA,
            parse=lambda value: prompts.parse_summary(value, max_tokens),
            max_output_tokens=max_tokens * 2,
        )

    def compact(
        self, previous: str, episodes: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        return self.generate_json(
            task="compact",
            system=prompts.compaction_instruction(previous, max_tokens),
            prompt=prompts.compaction_prompt(previous, episodes),
            schema=prompts.COMPACTION_SCHEMA,
            parse=lambda value: prompts.parse_compaction(value, previous, max_tokens),
            max_output_tokens=prompts.additions_bound(previous, max_tokens) * 2,
        )

    def extract(self, inp: ExtractionInput) -> Completion[list[Found]]:
        def parse(value: Any) -> list[Found]:
            ignored: list[str] = []
            found = write_prompts.parse_found(value, inp, ignored)
            # Reached only for the answer taken: a judgement naming no listed entity
            # is counted as the invalid answers are, and the rest of it stands.
            for what in ignored:
                accounting.count_invalid(self.transport.provider, "extract", Fault.UNKNOWN_ID)
                log.info("entity judgement ignored", provider=self.transport.provider, what=what)
            return found

        return self.generate_json(
            task="extract",
            system=write_prompts.extraction_instruction(inp),
            prompt=write_prompts.extraction_prompt(inp),
            schema=write_prompts.extraction_schema(inp),
            parse=parse,
            # A memory or two a turn, each a few dozen tokens of JSON: room grows with
            # the window, so a dense one is never cut off (and asked again).
            max_output_tokens=EXTRACT_MAX_OUTPUT_TOKENS * max(1, -(-len(inp.turns) // 5)),
        )

    def fill_profile(self, inp: ExtractionInput) -> Completion[list[ProfileFound]]:
        system, prompt = profile_prompts.PROFILE_INSTRUCTION, profile_prompts.profile_prompt(inp)
        schema, bound = profile_prompts.profile_schema(inp), PROFILE_MAX_OUTPUT_TOKENS
        parse = partial(profile_prompts.parse_profile, inp=inp)
        return self.generate_json(
            task="profile", system=system, prompt=prompt, schema=schema, parse=parse,
            max_output_tokens=bound,
        )  # fmt: skip

    def consolidate(self, weighings: list[Weighing]) -> Completion[list[Decision]]:
        return self.generate_json(
            task="consolidate",
            system=write_prompts.CONSOLIDATION_INSTRUCTION,
            prompt=write_prompts.consolidation_prompt(weighings),
            schema=write_prompts.consolidation_schema(weighings),
            parse=lambda value: write_prompts.parse_decisions(value, weighings),
            max_output_tokens=CONSOLIDATE_MAX_OUTPUT_TOKENS * max(1, len(weighings)),
        )

    def decompose(self, query: str, session_id: str, prev_session_id: str) -> Completion[list[str]]:
        return self.generate_json(
            task="decompose",
            system=prompts.decomposition_instruction(session_id, prev_session_id),
            prompt=prompts.decomposition_prompt(query),
            schema=prompts.DECOMPOSITION_SCHEMA,
            parse=prompts.parse_queries,
            max_output_tokens=DECOMPOSE_MAX_OUTPUT_TOKENS,
        )

    def generate_json(
        self,
        *,
        task: str,
        system: str,
        prompt: str,
        schema: dict[str, Any],
        parse: Callable[[Any], T],
        max_output_tokens: int,
    ) -> Completion[T]:
        """One structured task, asked as `shared.llm.asking` says."""
        request = Prompt(task, system, (ChatMessage("user", prompt),), schema, max_output_tokens)
        return ask(self.transport, request, parse, self.settings, self.throttle)
