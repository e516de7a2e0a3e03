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

Side by side on the same streams: the rules alone, and the rules with the
judgement a model provider may give (`shared.entities.judging`) as an oracle
gives it (the truth, for the names the listing puts in doubt): the ceiling of
what a model's judgement adds. No model is asked (the names come without the
conversation a model would judge them by).

    .venv/bin/python bench/entity_resolution.py [--users 50] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nicknames import NickNamer  # noqa: E402

from shared.entities.judging import Judgement, in_doubt, resolve_judged  # noqa: E402
from shared.entities.names import normalise  # noqa: E402
from shared.entities.resolution import UNSURE, Known  # noqa: E402

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


def oracle(name: str, kind: str, who: str, known: list[Known], whose: dict[str, str], at):
    """What a model that knew the truth would answer for a name the listing puts in
    doubt (`shared.entities.judging`): the listed entity that is `who`, else none of
    them; None when the name is in no doubt (the model is not asked)."""
    doubt = in_doubt(name, kind, known, at)
    if not doubt:
        return None
    same = next((e.id for e in doubt if whose[e.id] == who), None)
    if same is not None:
        return Judgement(name, same_as=same)
    return Judgement(name, distinct_from=tuple(e.id for e in doubt))


def resolved(said: list[tuple[str, str, str]], judge: bool) -> tuple[list[str], int]:
    """Each mention's entity, resolving in order as the writes do (with the oracle's
    judgement when `judge`), and how many mentions were in doubt."""
    known: list[Known] = []
    whose: dict[str, str] = {}  # entity → the person of the mention that made it
    out, doubted = [], 0
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for n, (name, kind, who) in enumerate(said):
        at = t0 + timedelta(minutes=n)
        judgement = oracle(name, kind, who, known, whose, at) if judge else None
        doubted += judgement is not None
        resolved = resolve_judged(name, kind, known, judgement)
        found, key = resolved.entity, normalise(name)
        if found is None:
            entity = Known(f"e{len(known)}", name, kind, (key,), at, at)
            known.append(entity)
            whose[entity.id] = who
        else:
            unsure = (key,) if resolved.how in UNSURE and key not in found.aliases else ()
            aliases, weak = (*found.aliases, key), (*found.weak, *unsure)
            entity = replace(found, aliases=aliases, weak=weak, last_seen=at)
            known = [entity if k.id == found.id else k for k in known]
        out.append(entity.id)
    return out, doubted


def pairwise(said: list[tuple[str, str, str]], entities: list[str]) -> tuple[int, int, int, int]:
    """(pairs put together, of those one person, pairs of one person, of those together)."""
    together = right = one_person = found = 0
    for (a, ea), (b, eb) in combinations(zip(said, entities, strict=True), 2):
        same_who, same_entity = a[2] == b[2], ea == eb
        together += same_entity
        right += same_entity and same_who
        one_person += same_who
        found += same_who and same_entity
    return together, right, one_person, found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng, namer = random.Random(args.seed), NickNamer()
    sums = {False: [0, 0, 0, 0], True: [0, 0, 0, 0]}
    mentions = doubted = 0
    for _ in range(args.users):
        said = stream(rng, namer)
        mentions += len(said)
        for judge in (False, True):
            entities, asked = resolved(said, judge)
            doubted += asked
            sums[judge] = [
                x + y for x, y in zip(sums[judge], pairwise(said, entities), strict=True)
            ]
    print(f"{args.users} users, {mentions} mentions ({', '.join(FORMS)})")
    print(f"{'':24} {'precision':>9} {'recall':>7}")
    for judge, label in ((False, "rules"), (True, "rules + oracle judgement")):
        together, right, one_person, found = sums[judge]
        precision = right / together if together else 1.0
        recall = found / one_person if one_person else 1.0
        print(f"{label:24} {precision:9.3f} {recall:7.3f}")
    print(
        f"in doubt (listed for a judgement): {doubted} of {mentions} mentions "
        f"({doubted / mentions:.1%})"
    )
    print(
        "No model provider is asked: the stream's names come without the conversation a "
        "model would judge them by, so a model could only guess. The oracle answers what "
        "a model that knew the truth would, for the names the listing puts in doubt: the "
        "most the judgement can add to the rules."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
