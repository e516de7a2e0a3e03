"""The entity benchmark's own dataset: conversations in which a user tells an
assistant about the people around them, their relations and what changes in
their lives, generated from a seed (the same seed, the same dataset), in the
format of `bench/recall_data.py`.

Each conversation is one user's archive: 12 sessions a week apart, each of chatter
that names no one, and the news below spread over the sessions, each story in
its own order of sessions. The questions:

- **multi-hop**: the answer is in a turn that names only someone a first turn
  introduced ("My colleague Greta became my manager" ... "Greta moved to
  Tallinn": "Where did my manager move?"; "Ravi adopted a dog called Pixel" ...
  "Pixel ate a whole cake": "What did Ravi's dog eat?");
- **temporal**: a fact that changed ("Idris lives in Porto" ... "Idris moved to
  Hanoi": "Where did Idris live before Hanoi?"; "Lucia started at Acme" ...
  "Lucia left Acme and joined Globex": "Where did Lucia work first?").

Distractors tell the same kinds of news of other people.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

SESSIONS = 12
PEOPLE = [
    "Greta", "Ravi", "Idris", "Lucia", "Moritz", "Fiona", "Kenji", "Ana", "Theo", "Nadia",
    "Oskar", "Bea", "Tariq", "Mira", "Pavel", "Ines",
]  # fmt: skip
PETS = ["Pixel", "Biscuit", "Mango", "Juniper", "Pickles", "Clover"]
CITIES = ["Porto", "Kyoto", "Tallinn", "Hanoi", "Oaxaca", "Palermo", "Tbilisi", "Lyon"]
ORGS = ["Acme", "Globex", "Initech", "Umbrella Labs", "Hooli", "Vandelay"]
FOODS = ["birthday cake", "pack of butter", "roast chicken", "bag of croissants"]
ROLES = ["manager", "mentor", "landlord", "dentist"]
CHATTER = [
    ("Long day today, I'm exhausted.", "Rest up, you earned it."),
    ("It rained all afternoon.", "Perfect weather for a book."),
    ("I finally cleaned the kitchen.", "That always feels good."),
    ("Any tips for sleeping better?", "Keep screens away an hour before bed."),
    ("I'm trying to drink more water.", "A bottle on the desk helps."),
    ("Work was quiet this week.", "Enjoy the calm while it lasts."),
    ("I started a new podcast about history.", "Nice, which era?"),
    ("The neighbours are renovating again.", "Earplugs might save you."),
]


def generate(seed: int, conversations: int) -> dict[str, Any]:
    rng = random.Random(seed * 7919 + 13)
    data: dict[str, Any] = {
        "name": "connected memory",
        "seed": seed,
        "conversations": [],
        "questions": [],
    }
    start = datetime(2025, 1, 6, 9, tzinfo=UTC)
    for c in range(1, conversations + 1):
        conv_id = f"e{c:02d}"
        people = rng.sample(PEOPLE, 8)
        cities = rng.sample(CITIES, 5)
        orgs = rng.sample(ORGS, 3)
        pet, food, role = rng.choice(PETS), rng.choice(FOODS), rng.choice(ROLES)
        boss, owner, mover, worker, *others = people
        # Each story: its lines in session order, and its question.
        stories = [
            (
                [
                    (
                        f"My colleague {boss} just became my {role}.",
                        "Congratulations to both of you!",
                    ),
                    (
                        f"{boss} moved to {cities[0]} last week, she loves it there.",
                        "What a change!",
                    ),
                ],
                "multi-hop",
                f"Where did my {role} move to?",
                (0, 1),
            ),
            (
                [
                    (f"{owner} adopted a dog called {pet}.", "Dogs are the best."),
                    (f"{pet} ate a whole {food} off the counter!", "Oh no, is everyone okay?"),
                ],
                "multi-hop",
                f"What did {owner}'s dog eat?",
                (0, 1),
            ),
            (
                [
                    (f"{mover} lives in {cities[1]} now, near the old harbour.", "Sounds lovely."),
                    (f"{mover} moved to {cities[2]} for good.", "Big step!"),
                ],
                "temporal",
                f"Where did {mover} live before {cities[2]}?",
                (0,),
            ),
            (
                [
                    (f"{worker} started a new job at {orgs[0]}.", "Exciting!"),
                    (f"{worker} left {orgs[0]} and joined {orgs[1]}.", "A busy year."),
                ],
                "temporal",
                f"Which company did {worker} work for first?",
                (0,),
            ),
        ]
        # Distractors: the same kinds of news of other people.
        distract = [
            (f"My cousin {others[0]} moved to {cities[3]}.", "Nice city."),
            (f"{others[1]} adopted a cat.", "Cats rule."),
            (f"{others[2]} started a new job at {orgs[2]}.", "Good for her."),
            (f"{others[3]} lives in {cities[4]}.", "Never been."),
        ]
        sessions: list[list[tuple[str, str, tuple[int, int] | None]]] = [
            [] for _ in range(SESSIONS)
        ]
        for s in range(SESSIONS):
            for user, assistant in rng.sample(CHATTER, 5):
                sessions[s].append((user, assistant, None))
        for n, (lines, _kind, _question, _evidence) in enumerate(stories):
            chosen = sorted(rng.sample(range(SESSIONS), len(lines)))
            for i, (s, (user, assistant)) in enumerate(zip(chosen, lines, strict=True)):
                sessions[s].insert(rng.randrange(len(sessions[s]) + 1), (user, assistant, (n, i)))
        for user, assistant in distract:
            s = rng.randrange(SESSIONS)
            sessions[s].insert(rng.randrange(len(sessions[s]) + 1), (user, assistant, None))
        where: dict[tuple[int, int], str] = {}
        conv: dict[str, Any] = {"conversation_id": conv_id, "sessions": []}
        for s, turns in enumerate(sessions, start=1):
            session_id = f"{conv_id}-s{s:02d}"
            day = start + timedelta(days=7 * (s - 1))
            listed = []
            for t, (user, assistant, mark) in enumerate(turns, start=1):
                turn_id = f"{session_id}-t{t:02d}"
                if mark is not None:
                    where[mark] = turn_id
                at = day + timedelta(minutes=3 * t)
                listed.append(
                    {
                        "turn_id": turn_id,
                        "created_at": at.isoformat(),
                        "user": user,
                        "assistant": assistant,
                    }
                )
            conv["sessions"].append({"session_id": session_id, "turns": listed})
        data["conversations"].append(conv)
        asked = start + timedelta(days=7 * SESSIONS)
        for n, (_lines, kind, question, evidence) in enumerate(stories):
            data["questions"].append(
                {
                    "conversation_id": conv_id,
                    "kind": kind,
                    "question": question,
                    "asked_at": asked.isoformat(),
                    "evidence": [where[(n, i)] for i in evidence],
                }
            )
    return data
