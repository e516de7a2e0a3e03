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
