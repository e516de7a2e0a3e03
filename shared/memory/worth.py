"""Nothing worth remembering, no model call: a cheap test of a turn before it
joins an extraction window. A turn it skips is archived (and searchable) as any
other; it is only never sent to the model.

It is deliberately timid: it skips a turn only when the user said nothing at all
(only tool traffic, or only the assistant spoke), or only a greeting or an
acknowledgement that the assistant answered with nothing but pleasantries, or
when the whole dialogue holds fewer than `MIN_CONTENT_WORDS` words beyond
function words. "I'm vegan." / "Noted." is
kept: two content words; so is "ok" / "Scheduled the nightly backups." (the
user accepted something). A short statement is worth a model call; "thanks" /
"you're welcome" is not.
"""

from __future__ import annotations

import re

from shared.llm.offline.phrasing import word_set

MIN_CONTENT_WORDS = 2

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)

_FUNCTION_WORDS = word_set(
    "a an the and or but if so of to in on at by for with from as is are was were be been am "
    "i me my we us our you your he she it its they them their this that these those there here "
    "do does did have has had will would can could shall should may might must not no yes "
    "i'm i've i'd i'll you're you've you'll it's that's there's let's what's don't"
)
_GREETINGS = word_set(
    "hi hello hey hiya howdy yo greetings morning afternoon evening good night bye goodbye "
    "cya see later welcome back there all everyone"
)
_ACKNOWLEDGEMENTS = word_set(
    "ok okay k kk thanks thank thx ty cheers cool great nice awesome perfect fine sure "
    "alright got it noted sounds good lol haha ha np problem much lot appreciated appreciate "
    "you very so excellent wonderful brilliant neat yep yup right indeed understood"
)
# What an assistant says back to a greeting or a thanks when it says nothing else.
_PLEASANTRIES = (
    _GREETINGS
    | _ACKNOWLEDGEMENTS
    | word_set(
        "welcome glad help helped helping anytime anything else let know need happy pleasure "
        "day care talk soon again too hope well doing today how can more ask feel free"
    )
)


def _words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def _content(words: list[str]) -> list[str]:
    return [w for w in words if w not in _FUNCTION_WORDS]


def skip_reason(user: str, assistant: str, tool_events: int = 0) -> str | None:
    """Why the turn holds nothing worth remembering (`tool_output`, `greeting`,
    `acknowledgement`, `few_words`), or None: extract it."""
    said = _words(user)
    answered = _content(_words(assistant))
    if not said:
        # Nothing of the user's: tool traffic and, at most, the assistant's account of it.
        return "tool_output" if tool_events else "few_words"
    own = _content(said)
    if len(own) + len(answered) < MIN_CONTENT_WORDS:
        return "few_words"
    if own and all(w in _PLEASANTRIES for w in answered):
        if all(w in _GREETINGS for w in own):
            return "greeting"
        if all(w in _ACKNOWLEDGEMENTS or w in _GREETINGS for w in own):
            return "acknowledgement"
    return None
