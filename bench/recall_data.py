"""The archive recall benchmark's dataset: long conversations between two friends,
generated from a seed (the same seed, the same dataset).

Each conversation is one user's archive: 24 sessions of 18 to 22 turns, each turn
one friend's line and the other's reply. The sessions are days apart and only
their turns' `created_at` carries a date: no turn's words name a month, a day of
the week, a season or a year. The questions are hard in the ways real ones are:

- **single-hop**: the answer is a reply that names nothing of the question ("And?
  How was it?" / "Loved it, honestly so calming"): only the turn before it says
  what "it" is;
- **multi-hop**: the evidence is in two sessions (the trip is planned in one and
  told of in another, where only the companion's name says which trip it was);
- **temporal**: "when did ..." (the date is in the session's header only) and
  "what did ... cook in May 2023" / "... last month", where the same kind of
  news is told in several months and only the date tells them apart (the
  question's `asked_at` is when it is asked).

Distractor turns share the question's words ("my cousin keeps asking me to join
her pottery class") in other sessions. Evidence lists the turns that hold the
answer.

    {"name": "...", "seed": 7,
     "conversations": [{"conversation_id": "c01", "speakers": ["Maya", "Leo"],
        "sessions": [{"session_id": "c01-s01", "turns": [
            {"turn_id": "c01-s01-t01", "created_at": "...", "user": "...",
             "assistant": "..."}]}]}],
     "questions": [{"conversation_id": "c01", "kind": "single-hop",
                    "question": "...", "asked_at": "...", "evidence": ["c01-s03-t05"]}]}
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

KINDS = ("single-hop", "multi-hop", "temporal")
SESSIONS = 24
NAMES = [
    ("Maya", "Leo"),
    ("Priya", "Tom"),
    ("Ines", "Marco"),
    ("Hannah", "Kofi"),
    ("Sofia", "Daniel"),
    ("Aiko", "Ben"),
    ("Lena", "Omar"),
    ("Clara", "Jonas"),
    ("Zoe", "Rafael"),
    ("Nora", "Sam"),
    ("Emma", "Luis"),
    ("Yara", "Felix"),
]
# Pronouns by name; the first of each pair is "she", the second "he".
SHE = {a for a, _ in NAMES}

HOBBIES = [
    "pottery",
    "salsa",
    "climbing",
    "sourdough",
    "life drawing",
    "improv",
    "woodworking",
    "calligraphy",
    "kickboxing",
    "watercolour",
    "ceramics glazing",
    "swing dance",
]
PETS = ["Pixel", "Biscuit", "Mango", "Juniper", "Pickles", "Olive", "Ziggy", "Clover"]
BREEDS = ["beagle", "greyhound", "border collie", "dachshund", "spaniel", "whippet"]
CITIES = ["Porto", "Kyoto", "Marrakesh", "Tbilisi", "Oaxaca", "Tallinn", "Hanoi", "Palermo"]
FRIENDS = ["Ravi", "Greta", "Moritz", "Ana", "Theo", "Lucia", "Idris", "Fiona", "Kenji"]
MISHAPS = [
    "food poisoning on the second day",
    "her passport stolen at the station",
    "stuck in the hotel lift for an hour",
    "a terrible sunburn",
    "lost at the market for half a day",
]
DISHES = [
    "a lemon drizzle cake",
    "mushroom risotto",
    "a Thai green curry",
    "homemade ramen",
    "a rhubarb crumble",
    "spinach lasagne",
    "a plum tart",
    "fish tacos",
    "beef stew",
    "shakshuka",
]
SPORTS = ["football", "badminton", "hockey", "tennis", "netball", "squash"]
RESTS = ["six weeks", "ten days", "a month", "three weeks"]
BABIES = ["Ada", "Milo", "Rosa", "Elias", "Freya", "Noah", "Iris", "Arlo"]
SIBLINGS = ["sister", "brother", "cousin"]
VEHICLES = ["bike", "scooter", "van", "car"]
COLOURS = ["Red", "Dark green", "Bright yellow", "Matte black", "Sky blue"]
GIFTS = [
    "a record player",
    "a cast iron pan",
    "a telescope",
    "a fountain pen",
    "a bonsai tree",
    "noise cancelling headphones",
]
COMPANIES = ["Northwind", "Brightline", "Fable Labs", "Kestrel", "Orbis", "Tidewater"]
ROLES = ["product designer", "data analyst", "team lead", "copywriter", "site engineer"]
NEIGHBOURHOODS = ["Kreuzberg", "Clapham", "Gracia", "Fitzroy", "Le Marais", "Shimokita"]
JOBS = ["nurse", "architect", "chef", "firefighter", "violinist", "vet"]
LENT = ["a ladder", "a drill", "a tent", "a slow cooker", "jump leads"]

# Small talk: a line and its reply.
SMALL_TALK = [
    ("Ugh, what a day. The trains were a mess again.", "Oh no, hang in there."),
    ("Did you watch the new episode of that detective show?", "Not yet, no spoilers!"),
    ("I'm so tired, I need a holiday.", "Same here, honestly."),
    ("What are you having for dinner?", "Pasta, probably. Always pasta."),
    ("Work is chaos right now, three deadlines at once.", "That sounds exhausting."),
    ("It has not stopped raining here.", "Same here, it's grim."),
    ("I think I'm getting a cold.", "Drink some tea and get some rest."),
    ("Just got back from the supermarket, it was packed.", "Ha, I know the feeling."),
    ("Any plans for the weekend?", "Nothing much, maybe a long walk."),
    ("I finally cleaned the kitchen properly.", "Good for you!"),
    ("My phone screen cracked, of course.", "Classic. Is it still usable?"),
    ("I can't decide what to watch tonight.", "Rewatch something cosy."),
    ("The neighbours are drilling again.", "At this hour? Brutal."),
    ("I tried that new coffee place near the office.", "And? Worth it?"),
    ("Do you still have that spare charger?", "I might have one somewhere, I'll look."),
    ("I've been sleeping so badly lately.", "Try no screens before bed."),
    ("My inbox is a disaster.", "Declare bankruptcy and start over."),
    ("Guess who I ran into at the bakery.", "Ooh, who?"),
    ("The heating broke again, I'm wearing two jumpers.", "Call the landlord, seriously."),
    ("I started a podcast about old shipwrecks.", "That is very you."),
    ("Running late, talk in a bit?", "Sure, no rush."),
    ("I need a new pair of boots.", "Get the waterproof ones this time."),
]
# Other news told "for the first time": what only the date tells from the dishes.
FIRSTS = [
    "Tried paddleboarding for the first time, fell in twice.",
    "Went to the opera for the first time, surprisingly fun.",
    "Saw a fox in the garden for the first time.",
    "Took the night train for the first time, slept like a baby.",
    "Ran five kilometres without stopping for the first time!",
    "Voted in the local election for the first time.",
    "Drove on the motorway for the first time, terrifying.",
    "Cooked for my in-laws for the first time, nobody died.",
]
REACTIONS = ["Nice!", "Oh really?", "Ha, good for you.", "No way!", "Funny.", "Huh, okay."]
VERDICTS = [
    "Loved it, honestly so calming. I already booked the next one.",
    "Amazing. I was terrible, but I laughed the whole time.",
    "Better than I expected, the teacher was brilliant.",
    "Not my thing, to be honest. Too much standing around.",
    "Awful. I left at the break and went for a burger.",
    "Meh. Way too crowded, I couldn't hear a word.",
]
BANDS = [
    "Little Simz",
    "The National",
    "Khruangbin",
    "Fontaines",
    "Wet Leg",
    "Bonobo",
    "Arlo Parks",
]
BOOKS = ["Piranesi", "Stoner", "The Overstory", "Circe", "Middlemarch", "Klara and the Sun"]
BOOK_VERDICTS = [
    "Couldn't put it down, finished it in two nights.",
    "Gave up halfway, too slow for me.",
    "Beautiful, but it made me cry on the bus.",
]


@dataclass
class Line:
    by: str  # "S": the subject of the news; "O": the other friend
    text: str
    evidence: str | None = None  # a label the questions refer to


@dataclass
class Event:
    """News told in consecutive turns of one session."""

    subject: str
    lines: list[Line]
    # (kind, question, evidence: [(event index in the conversation or None for
    # this event, the label of the evidence line)])
    questions: list[tuple[str, str, list[tuple[int | None, str]]]] = field(default_factory=list)


@dataclass
class Placed:
    turns: list[tuple[str, str]]
    labels: dict[str, int]  # evidence label -> turn offset


def _arrange(lines: list[Line], subject_is_a: bool, rng: random.Random) -> Placed:
    """The lines as turns (first friend's line, second friend's reply): the first
    friend opens if the subject is the second, and the second closes."""
    said = [("A" if (ln.by == "S") == subject_is_a else "B", ln) for ln in lines]
    if said[0][0] == "B":
        said.insert(0, ("A", Line("O", rng.choice(["So, any news?", "How are things?"]))))
    turns: list[tuple[str, str]] = []
    labels: dict[str, int] = {}
    i = 0
    while i < len(said):
        a = said[i][1]
        b = said[i + 1][1] if i + 1 < len(said) and said[i + 1][0] == "B" else None
        for ln in (a, b):
            if ln is not None and ln.evidence:
                labels[ln.evidence] = len(turns)
        turns.append((a.text, b.text if b else rng.choice(REACTIONS)))
        i += 2 if b else 1
    return Placed(turns, labels)


class Conversation:
    def __init__(self, rng: random.Random, index: int, a: str, b: str) -> None:
        self.rng = rng
        self.id = f"c{index:02d}"
        self.names = (a, b)
        self.events: list[Event] = []
        # Lines that share a question's words, each with the event it must not
        # share a session with.
        self.distractors: list[tuple[str, int]] = []

    def distract(self, event: int, *lines: str) -> None:
        self.distractors += [(line, event) for line in lines]

    def pick(self, pool: list[Any], used: set[Any]) -> Any:
        choice = self.rng.choice([x for x in pool if x not in used] or pool)
        used.add(choice)
        return choice


def _own(kind: str, question: str, label: str) -> tuple[str, str, list[tuple[int | None, str]]]:
    """A question answered by the line `label` of the event that asks it."""
    return (kind, question, [(None, label)])


def _pronoun(name: str) -> tuple[str, str, str]:
    """Subject, object and possessive."""
    return ("she", "her", "her") if name in SHE else ("he", "him", "his")


def _events(conv: Conversation) -> list[tuple[Event, int | None]]:
    """The news of a conversation, each with the event it must come after (in a
    later session), if any."""
    rng = conv.rng
    a, b = conv.names
    hobbies: set[str] = set()
    out: list[tuple[Event, int | None]] = []

    def tell(event: Event, *distractors: str) -> None:
        """News with no event to follow, and the lines that share its question's
        words (placed in other sessions)."""
        out.append((event, None))
        conv.distract(len(out) - 1, *distractors)

    for s in (a, b):
        o = b if s == a else a
        _she, her, her_own = _pronoun(s)
        for _ in range(3):
            hobby = conv.pick(HOBBIES, hobbies)
            verdict = rng.choice(VERDICTS)
            tell(
                Event(
                    s,
                    [
                        Line("S", f"I finally went to that {hobby} class I told you about."),
                        Line("O", "Oh yes! And? How was it?"),
                        Line("S", verdict, "verdict"),
                        Line("O", rng.choice(["Ha, fair enough.", "Love that for you."])),
                    ],
                    [_own("single-hop", f"What did {s} think of the {hobby} class?", "verdict")],
                ),
                f"My cousin keeps asking me to join her {hobby} class, no thanks.",
                f"There's a poster for a {hobby} class at the library.",
            )
        for band in rng.sample(BANDS, 2):
            tell(
                Event(
                    s,
                    [
                        Line("O", f"Did you go to the {band} gig in the end?"),
                        Line("S", "I did!"),
                        Line("O", "And?"),
                        Line("S", rng.choice(VERDICTS), "verdict"),
                    ],
                    [_own("single-hop", f"How did {s} like the {band} concert?", "verdict")],
                ),
                f"Tickets for {band} sold out in minutes, apparently.",
            )
        for book in rng.sample(BOOKS, 2):
            tell(
                Event(
                    s,
                    [
                        Line("S", f"I started {book}, the one you lent me."),
                        Line("O", "Ooh. Any good?"),
                        Line("S", rng.choice(BOOK_VERDICTS), "verdict"),
                    ],
                    [_own("single-hop", f"Did {s} enjoy reading {book}?", "verdict")],
                ),
                f"The library has a waiting list for {book}.",
            )
        pet, breed = rng.choice(PETS), rng.choice(BREEDS)
        tell(
            Event(
                s,
                [
                    Line("S", f"Meet {pet}! We brought him home from the shelter today.", "pet"),
                    Line("O", "Oh my god, the ears! What breed is he?"),
                    Line("S", f"A {breed}, three years old and very shy.", "breed"),
                    Line("O", "I need to meet him."),
                ],
                [
                    _own("temporal", f"When did {s} adopt {pet}?", "pet"),
                    _own("single-hop", f"What breed is {s}'s dog {pet}?", "breed"),
                ],
            ),
            f"The shelter near me posted a {breed} puppy today.",
            f"My aunt's dog is also called {pet}, funny.",
        )
        sport, rest = rng.choice(SPORTS), rng.choice(RESTS)
        tell(
            Event(
                s,
                [
                    Line("S", f"I twisted my ankle playing {sport}, so stupid.", "sprain"),
                    Line("O", "Ouch! Is it bad?"),
                    Line("S", f"Just a sprain. {rest.capitalize()} of rest, apparently.", "rest"),
                    Line("O", "Take it easy, seriously."),
                ],
                [
                    _own(
                        "single-hop",
                        f"How long does {s} have to rest after hurting {her_own} ankle?",
                        "rest",
                    ),
                    _own(
                        "temporal", f"When did {s} twist {her_own} ankle playing {sport}?", "sprain"
                    ),
                ],
            ),
            f"We watched the {sport} final at the pub, what a match.",
        )
        sibling, baby = rng.choice(SIBLINGS), rng.choice(BABIES)
        child, them = rng.choice([("girl", "her"), ("boy", "him")])
        tell(
            Event(
                s,
                [
                    Line("S", f"My {sibling} just had a baby!", "born"),
                    Line("O", "Congratulations!! Boy or girl?"),
                    Line("S", f"A {child}, they called {them} {baby}.", "baby"),
                    Line("O", "What a lovely name."),
                ],
                [
                    _own("single-hop", f"What is the name of {s}'s {sibling}'s baby?", "baby"),
                    _own("temporal", f"When did {s}'s {sibling} have a baby?", "born"),
                ],
            ),
            f"My {sibling} wants a baby name book for some reason.",
        )
        vehicle, colour = rng.choice(VEHICLES), rng.choice(COLOURS)
        tell(
            Event(
                s,
                [
                    Line(
                        "S",
                        f"I bought a {vehicle}! Second hand but it runs like new.",
                        "bought",
                    ),
                    Line("O", "Finally! What colour?"),
                    Line("S", f"{colour}, obviously.", "colour"),
                    Line("O", "Of course it is."),
                ],
                [
                    _own("single-hop", f"What colour is {s}'s {vehicle}?", "colour"),
                    _own("temporal", f"When did {s} buy the {vehicle}?", "bought"),
                ],
            ),
            f"Someone parked a {colour.lower()} {vehicle} across my drive.",
        )
        gift = rng.choice(GIFTS)
        tell(
            Event(
                s,
                [
                    Line("S", f"I got you something for your birthday, {o}. Don't laugh."),
                    Line("O", "What is it??"),
                    Line("S", f"{gift[0].upper()}{gift[1:]}. You said you wanted one.", "gift"),
                    Line("O", "Stop, I love it."),
                ],
                [
                    _own(
                        "single-hop",
                        f"What did {s} give {o} for {_pronoun(o)[2]} birthday?",
                        "gift",
                    )
                ],
            ),
            "My birthday dinner is sorted, finally.",
        )
        company, role = rng.choice(COMPANIES), rng.choice(ROLES)
        tell(
            Event(
                s,
                [
                    Line("O", f"Did you hear back from {company}?"),
                    Line("S", f"Yes! They offered me the {role} job."),
                    Line("O", "Amazing. Are you taking it?"),
                    Line("S", "Already signed. I start in two weeks.", "accepted"),
                ],
                [_own("single-hop", f"Did {s} accept the job offer from {company}?", "accepted")],
            ),
            f"A recruiter from {company} messaged me about some job.",
        )
        place = rng.choice(NEIGHBOURHOODS)
        tell(
            Event(
                s,
                [
                    Line("O", "How's the flat hunt going?"),
                    Line("S", f"Signed the lease! {place}, two bedrooms.", "flat"),
                ],
                [
                    _own("single-hop", f"Which neighbourhood did {s} move to?", "flat"),
                    _own(
                        "temporal", f"When did {s} sign the lease for the flat in {place}?", "flat"
                    ),
                ],
            ),
        )
        # Multi-hop: a trip planned in one session and told of in a later one.
        city, friend = rng.choice(CITIES), rng.choice(FRIENDS)
        plan = Event(
            s,
            [
                Line("S", f"Booked it: {friend} and I are going to {city}!", "plan"),
                Line("O", "So jealous. Send pictures."),
            ],
        )
        back = Event(
            s,
            [
                Line("S", f"We're back. {friend} got {rng.choice(MISHAPS)}.", "mishap"),
                Line("O", "Oh no, poor thing."),
            ],
        )
        out.append((plan, None))
        out.append((back, len(out) - 1))  # after the plan
        back.questions.append(
            (
                "multi-hop",
                f"What went wrong for the friend who went to {city} with {s}?",
                [(len(out) - 2, "plan"), (len(out) - 1, "mishap")],
            )
        )
        # Multi-hop: a neighbour introduced by job, later named only.
        neighbour, job, lent = rng.choice(FRIENDS), rng.choice(JOBS), rng.choice(LENT)
        meet = Event(
            s, [Line("S", f"My new neighbour {neighbour} is a {job}, we chatted for ages.", "meet")]
        )
        lend = Event(s, [Line("S", f"{neighbour} lent me {lent}, so kind.", "lent")])
        out.append((meet, None))
        out.append((lend, len(out) - 1))
        lend.questions.append(
            (
                "multi-hop",
                f"What did {s}'s neighbour who works as a {job} lend {her}?",
                [(len(out) - 2, "meet"), (len(out) - 1, "lent")],
            )
        )
        # Temporal: the same news in several months; only the date tells which.
        for dish in rng.sample(DISHES, 5):
            cook = Event(
                s, [Line("S", f"Made {dish} for the first time, it turned out great.", "cook")]
            )
            cook.questions.append(_own("temporal", "", "cook"))  # worded once placed
            out.append((cook, None))
        conv.distract(len(out) - 1, *rng.sample(FIRSTS, 4))
    return out


def _place(
    planned: list[tuple[Event, int | None]], times: list[datetime], rng: random.Random
) -> list[int]:
    """A session for each event: a follow-up in a later session than what it
    follows, and one friend's cooking news each in a month of its own."""
    followed = {after for _, after in planned if after is not None}
    months: dict[str, set[tuple[int, int]]] = {}
    session_of: list[int] = []
    for i, (event, after) in enumerate(planned):
        low = session_of[after] + 1 if after is not None else 0
        high = SESSIONS - 4 if i in followed else SESSIONS
        allowed = list(range(low, max(high, low + 1)))
        if event.lines[0].evidence == "cook":
            taken = months.setdefault(event.subject, set())
            allowed = [s for s in allowed if (times[s].year, times[s].month) not in taken]
            s = rng.choice(allowed)
            taken.add((times[s].year, times[s].month))
        else:
            s = rng.choice(allowed)
        session_of.append(s)
    return session_of


def _cooking_question(
    subject: str, told: datetime, last: datetime, rng: random.Random
) -> tuple[str, datetime]:
    """A question about the dish `subject` first made in the month of `told`, and
    when it is asked: after the conversation ("in May 2023") or in the next month
    ("last month")."""
    if rng.random() < 0.7:
        return f"What did {subject} cook for the first time in {told:%B %Y}?", last
    next_month = (told.replace(day=1) + timedelta(days=32)).replace(day=rng.randrange(3, 26))
    return f"What did {subject} cook for the first time last month?", next_month


def _schedule(rng: random.Random) -> list[datetime]:
    """When each session begins: days apart, each at its own time of day."""
    day = datetime(2022 + rng.randrange(2), rng.randrange(1, 13), 1 + rng.randrange(3), tzinfo=UTC)
    days = [day]
    for _ in range(SESSIONS - 1):
        days.append(days[-1] + timedelta(days=rng.randrange(9, 19)))
    return [d + timedelta(hours=rng.choice([8, 10, 13, 16, 19, 21])) for d in days]


def _conversation(index: int, a: str, b: str, rng: random.Random) -> tuple[dict, list[dict]]:
    conv = Conversation(rng, index, a, b)
    times = _schedule(rng)
    planned = _events(conv)
    session_of = _place(planned, times, rng)
    # Each distractor in a session of its own choosing, not its event's.
    distracting: dict[int, list[str]] = {}
    for line, event in conv.distractors:
        s = rng.choice([s for s in range(SESSIONS) if s != session_of[event]])
        distracting.setdefault(s, []).append(line)
    sessions: list[list[tuple[str, str]]] = []
    where: dict[int, tuple[int, int, dict[str, int]]] = {}  # event -> session, turn, labels
    for s in range(SESSIONS):
        blocks: list[tuple[int | None, Placed]] = []
        for i in rng.sample(
            [i for i, at in enumerate(session_of) if at == s], k=session_of.count(s)
        ):
            event = planned[i][0]
            blocks.append((i, _arrange(event.lines, event.subject == a, rng)))
        chats = [(line, rng.choice(REACTIONS)) for line in distracting.get(s, [])]
        size = sum(len(p.turns) for _, p in blocks) + len(chats)
        chats += [rng.choice(SMALL_TALK) for _ in range(max(0, rng.randrange(18, 23) - size))]
        for chat in chats:
            small = Placed([chat], {})
            blocks.insert(rng.randrange(len(blocks) + 1), (None, small))
        turns: list[tuple[str, str]] = []
        for i, placed in blocks:
            if i is not None:
                where[i] = (s, len(turns), placed.labels)
            turns += placed.turns
        sessions.append(turns)

    def turn_id(s: int, t: int) -> str:
        return f"{conv.id}-s{s + 1:02d}-t{t + 1:02d}"

    conversation = {
        "conversation_id": conv.id,
        "speakers": [a, b],
        "sessions": [
            {
                "session_id": f"{conv.id}-s{s + 1:02d}",
                "turns": [
                    {
                        "turn_id": turn_id(s, t),
                        "created_at": (times[s] + timedelta(minutes=2 * t)).isoformat(),
                        "user": user,
                        "assistant": reply,
                    }
                    for t, (user, reply) in enumerate(turns)
                ],
            }
            for s, turns in enumerate(sessions)
        ],
    }
    after_all = times[-1] + timedelta(days=1)
    questions = []
    for i, (event, _) in enumerate(planned):
        for kind, text, refs in event.questions:
            asked = after_all
            if not text:
                text, asked = _cooking_question(event.subject, times[where[i][0]], after_all, rng)
            evidence = []
            for j, label in refs:
                s, t, labels = where[i if j is None else j]
                evidence.append(turn_id(s, t + labels[label]))
            questions.append(
                {
                    "conversation_id": conv.id,
                    "kind": kind,
                    "question": text,
                    "asked_at": asked.isoformat(),
                    "evidence": evidence,
                }
            )
    return conversation, questions


def generate(seed: int = 7, conversations: int = 10) -> dict[str, Any]:
    """The dataset: `conversations` conversations (at most len(NAMES)), from `seed`."""
    rng = random.Random(seed)
    convs, questions = [], []
    for index, (a, b) in enumerate(NAMES[:conversations], start=1):
        conversation, asked = _conversation(index, a, b, random.Random(rng.random()))
        convs.append(conversation)
        questions += asked
    return {
        "name": f"generated conversations (bench/recall_data.py, seed {seed})",
        "seed": seed,
        "conversations": convs,
        "questions": questions,
    }
