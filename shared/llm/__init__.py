"""LLM providers, chosen by `AM_LLM_PROVIDER`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.config import Settings
from shared.llm.base import (
    ACTIONS,
    KINDS,
    LLM,
    SCOPES,
    Action,
    Candidate,
    Completion,
    Decision,
    DialogueTurn,
    ExistingMemory,
    ExtractionInput,
    ExtractionTurn,
    Fault,
    Found,
    InvalidAnswer,
    LLMError,
    MalformedReply,
    Usage,
    Weighing,
)
from shared.llm.offline import OfflineLLM

if TYPE_CHECKING:
    from shared.llm.throttle import Throttle

__all__ = [
    "ACTIONS",
    "Action",
    "KINDS",
    "LLM",
    "SCOPES",
    "Candidate",
    "Completion",
    "Decision",
    "DialogueTurn",
    "ExistingMemory",
    "ExtractionInput",
    "ExtractionTurn",
    "Fault",
    "Found",
    "InvalidAnswer",
    "LLMError",
    "MalformedReply",
    "OfflineLLM",
    "Usage",
    "Weighing",
    "make_llm",
]


def make_llm(settings: Settings, throttle: Throttle | None = None) -> LLM:
    """The provider `AM_LLM_PROVIDER` names; a model's calls within `throttle`."""
    if settings.llm_provider == "gemini":
        from shared.llm.gemini import GeminiLLM  # google-genai loads only when chosen

        return GeminiLLM(settings, throttle=throttle)
    if settings.llm_provider == "openai":
        from shared.llm.openai_compatible import OpenAILLM  # openai loads only when chosen

        return OpenAILLM(settings, throttle=throttle)
    return OfflineLLM()
