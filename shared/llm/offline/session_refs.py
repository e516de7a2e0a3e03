"""Temporal coreference for the `offline` provider: relative references to a session
become explicit session IDs, as the reference's extraction prompt asks of the model.

- "now", "right now", "for now", "currently", "today", "this session", "the
  current session" name the current session;
- "last session", "previous session", "my/our/the previous session" (with an
  optional "in", "during", "from") name the previous one, and are left as they
  are when it is not known;
- "from now on" names no session: it marks a lasting change, so it is dropped.

Extraction moves the reference to the end of the memory ("User prefers Python in
session sess_2026_01."); decomposition rewrites it in place.
"""

from __future__ import annotations

import re

_FROM_NOW_ON = re.compile(r",?\s*\bfrom\s+now\s+on\b,?", re.I)
_PREVIOUS = re.compile(
    r"\b(?:(?:in|during|from|at|of)\s+)?(?:(?:my|our|the|your)\s+)?(?:last|previous|prior)\s+"
    r"session\b",
    re.I,
)
_CURRENT = re.compile(
    r"\b(?:(?:in|during|for|at|of)\s+)?(?:this|the\s+current)\s+session\b"
    r"|\b(?:(?:for|as\s+of)\s+)?(?:right\s+)?now\b"
    r"|\bcurrently\b"
    r"|\b(?:(?:as\s+of|for)\s+)?today\b",
    re.I,
)


def tidy(text: str) -> str:
    """Spaces and commas left behind by a removed phrase, cleaned up."""
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    text = re.sub(r",(\s*[,.;:!?])", r"\1", text)
    return text.strip(" ,;:")


def strip_session_refs(text: str, session_id: str, prev_session_id: str) -> tuple[str, str]:
    """`text` without its references to a session, and the session they name ("" if
    none). A previous-session reference wins over a current one."""
    text = _FROM_NOW_ON.sub(" ", text)
    named = ""
    if prev_session_id and _PREVIOUS.search(text):
        text = _PREVIOUS.sub(" ", text)
        named = prev_session_id
    if session_id and _CURRENT.search(text):
        text = _CURRENT.sub(" ", text)
        named = named or session_id
    return tidy(text), named


def rewrite_session_refs(text: str, session_id: str, prev_session_id: str) -> str:
    """`text` with each reference to a session replaced, where it stands, by
    "in session <id>"."""
    text = _FROM_NOW_ON.sub(" ", text)
    if prev_session_id:
        text = _PREVIOUS.sub(f"in session {prev_session_id}", text)
    if session_id:
        text = _CURRENT.sub(f"in session {session_id}", text)
    return tidy(text)
