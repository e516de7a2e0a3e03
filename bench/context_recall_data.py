"""The context recall benchmark's questions: those of the archive recall dataset
(`bench/recall_data.py`: single-hop, multi-hop across sessions, temporal, each with
its evidence turns) and, per conversation, questions about things never said in
it: a class, a book, a dog, a trip and a vehicle of the same kinds as the
conversation's news, but none that any of its turns names. They have no evidence;
the benchmark reports what the context spends on them."""

from __future__ import annotations

import random
from typing import Any

from bench.recall_data import BOOKS, CITIES, HOBBIES, NAMES, PETS, generate

NEVER_SAID = "never said"
KINDS = ("single-hop", "multi-hop", "temporal", NEVER_SAID)
BOATS = ["canoe", "sailing boat", "kayak", "motorbike", "camper"]


def _unsaid(pool: list[str], said: str, rng: random.Random) -> str | None:
    left = [x for x in pool if x.lower() not in said]
    return rng.choice(left) if left else None


def never_said(conversation: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    """Questions about one speaker of `conversation` that none of its turns answers."""
    said = " ".join(
        f"{turn['user']} {turn['assistant']}".lower()
        for session in conversation["sessions"]
        for turn in session["turns"]
    )
    asked_at = conversation["sessions"][-1]["turns"][-1]["created_at"]
    who = rng.choice(conversation["speakers"])
    templates = [
        (HOBBIES, "What did {who} think of the {x} class?"),
        (BOOKS, "Did {who} enjoy reading {x}?"),
        (PETS, "What breed is {who}'s dog {x}?"),
        (CITIES, "What went wrong on {who}'s trip to {x}?"),
        (BOATS, "What colour is {who}'s {x}?"),
    ]
    questions = []
    for pool, template in templates:
        thing = _unsaid(pool, said, rng)
        if thing is not None:
            questions.append(
                {
                    "conversation_id": conversation["conversation_id"],
                    "kind": NEVER_SAID,
                    "question": template.format(who=who, x=thing),
                    "asked_at": asked_at,
                    "evidence": [],
                }
            )
    return questions


def dataset(conversations: int, seed: int = 7) -> dict[str, Any]:
    """The recall dataset's first `conversations` conversations (at most
    len(NAMES)) with their questions and the never-said ones."""
    data = generate(seed=seed, conversations=min(conversations, len(NAMES)))
    rng = random.Random(seed)
    for conversation in data["conversations"]:
        data["questions"] += never_said(conversation, rng)
    return data
