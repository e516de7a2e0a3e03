"""The one token estimator used for triggers, budgets and reports.

About four characters of English per token, the rule of thumb of the Gemini
and OpenAI tokenizers; it never returns 0 for non-empty text.
"""

from __future__ import annotations

import math


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    return max(1, math.ceil(len(text) / 4))


def clip_to_tokens(text: str, max_tokens: int) -> str:
    """`text` cut to at most `max_tokens` by the estimator: at the last sentence end
    that fits, else at the last space, else mid-word. Unchanged when it fits."""
    if estimate_tokens(text) <= max_tokens:
        return text
    cut = text[: max(0, max_tokens * 4)]
    for boundary in (". ", "! ", "? ", "\n"):
        end = cut.rfind(boundary)
        if end > len(cut) // 2:
            return cut[: end + 1].rstrip()
    space = cut.rfind(" ")
    return (cut[:space] if space > len(cut) // 2 else cut).rstrip()
