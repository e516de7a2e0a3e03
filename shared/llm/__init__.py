"""LLM providers, chosen by `AM_LLM_PROVIDER`."""

from __future__ import annotations

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
    Found,
    LLMError,
    MalformedReply,
    Usage,
    Weighing,
)
from shared.llm.rules import RulesLLM

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
    "Found",
    "LLMError",
    "MalformedReply",
    "RulesLLM",
    "Usage",
    "Weighing",
    "make_llm",
]


def make_llm(settings: Settings) -> LLM:
    if settings.llm_provider == "gemini":
        from shared.llm.gemini import GeminiLLM  # google-genai loads only when chosen

        return GeminiLLM(settings)
    return RulesLLM()
