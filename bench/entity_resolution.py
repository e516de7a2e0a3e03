"""Entity resolution benchmark: precision and recall of `shared.entities.resolution`
on a set of its own, generated from a seed.

Each user's stream of mentions names a few people (a first and a last name) and
places, each person mentioned by their full name, in another case, with a typo
(two inner letters swapped), by a nickname (`nicknames` dataset: Robert → Bob)
with or without the surname, and by the first name alone; among the people, two
share a first name. The mentions are resolved in order, as the writes resolve
them (`Entities.resolve_all`: each new entity known to the next mention), and
compared with the truth pairwise: precision is the share of the mention pairs put
in one entity that are one person, recall the share of one person's pairs put
in one entity. A bare first name two known people share resolves to the one seen
last: it counts as right when that is the one meant.

    .venv/bin/python bench/entity_resolution.py [--users 50] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import UTC, datetime, timedelta
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nicknames import NickNamer  # noqa: E402

from shared.entities.names import normalise  # noqa: E402
from shared.entities.resolution import Known, resolve  # noqa: E402

FIRSTS = ["robert", "elizabeth", "william", "katherine", "michael", "jennifer", "dana", "priya"]
LASTS = ["Smith", "Lee", "Okafor", "Novak", "Garcia", "Tanaka", "Weber", "Silva", "Moreau"]
PLACES = ["Berlin", "Lisbon", "Kyoto", "Oslo"]
FORMS = ("full", "case", "typo", "nickname", "nickname full", "first")


def typo(word: str, rng: random.Random) -> str:
    """Two inner letters swapped (a word of five letters or more)."""
    if len(word) < 5:
        return word
    i = rng.randrange(1, len(word) - 2)
    return word[:i] + word[i + 1] + word[i] + word[i + 2 :]


def stream(rng: random.Random, namer: NickNamer) -> list[tuple[str, str, str]]:
    """(name, kind, who) in the order said: the truth is `who`."""
    firsts = rng.sample(FIRSTS, 3)
    people = [(f, rng.choice(LASTS)) for f in firsts]
    # Two people of one first name.
    people.append((firsts[0], rng.choice([x for x in LASTS if x != people[0][1]])))
    intro: list[tuple[str, str, str]] = []
    rest: list[tuple[str, str, str]] = [(p, "place", p) for p in rng.sample(PLACES, 2)]
    for first, last in people:
        who = f"{first} {last}"
        full = f"{first.title()} {last}"
        nicks = sorted(namer.nicknames_of(first)) or [first]
        forms = {
            "full": full,
            "case": full.upper(),
            "typo": f"{first.title()} {typo(last, rng)}",
            "nickname": rng.choice(nicks).title(),
            "nickname full": f"{rng.choice(nicks).title()} {last}",
            "first": first.title(),
        }
        intro.append((full, "person", who))  # each introduced by the full name first
        rest += [(forms[f], "person", who) for f in FORMS]
    rng.shuffle(rest)
    return intro + rest


def resolved(said: list[tuple[str, str, str]]) -> list[str]:
    """Each mention's entity, resolving in order as the writes do."""
    known: list[Known] = []
    out = []
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for n, (name, kind, _who) in enumerate(said):
        at = t0 + timedelta(minutes=n)
        found = resolve(name, kind, known).entity
        key = normalise(name)
        if found is None:
            entity = Known(f"e{len(known)}", name, kind, (key,), at)
            known.append(entity)
        else:
            entity = Known(found.id, found.name, found.kind, (*found.aliases, key), at)
            known = [entity if k.id == found.id else k for k in known]
        out.append(entity.id)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng, namer = random.Random(args.seed), NickNamer()
    together = right_together = one_person = found_of_person = mentions = 0
    for _ in range(args.users):
        said = stream(rng, namer)
        entities = resolved(said)
        mentions += len(said)
        for (a, ea), (b, eb) in combinations(zip(said, entities, strict=True), 2):
            same_who, same_entity = a[2] == b[2], ea == eb
            together += same_entity
            right_together += same_entity and same_who
            one_person += same_who
            found_of_person += same_who and same_entity
    precision = right_together / together if together else 1.0
    recall = found_of_person / one_person if one_person else 1.0
    print(f"{args.users} users, {mentions} mentions ({', '.join(FORMS)})")
    print(f"pairwise precision {precision:.3f}, recall {recall:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
