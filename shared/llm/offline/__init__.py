"""The offline LLM provider (`AM_LLM_PROVIDER=offline`): deterministic code, no
model (`provider`); its tasks each in a module of this package."""

from shared.llm.offline.provider import OfflineLLM

__all__ = ["OfflineLLM"]
