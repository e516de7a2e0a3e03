"""What the harness prints: a line at a time, flushed, so a long run shows its progress."""

from __future__ import annotations


def say(text: str) -> None:
    print(text, flush=True)


def indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())
