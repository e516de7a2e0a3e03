"""Entity names for the `offline` provider: a small facet lexicon, so that two
statements about the same thing get the same `entity_name` ("I prefer Dark Mode
UI", later "I've switched to Light Mode": both "ui theme").

- A statement with a subject ("the short-term cache is ...", "my editor is ...")
  is named by the subject: the facet of its rightmost word that names one (its
  head noun: "short-term cache" → "cache"); a generic subject ("the stack", "the
  framework") by the facet of its value; otherwise the subject itself, normalised
  ("all tool execution timeouts" → "tool execution timeout").
- A statement without one ("I prefer Dark Mode UI", "I've switched to Django") is
  named by the first facet its value names ("standardizing on Python 3.11 with
  PostgreSQL" → "programming language"), else by the value's leading noun
  phrase, normalised ("concise answers with examples" → "concise answer").

Normalised: lowercase, without leading determiners and possessives, the last
word made singular by a plain rule (-ies → -y, -sses → -ss, -s → "").
"""

from __future__ import annotations

import re

from shared.llm.offline.phrasing import word_set

# facet → the words and phrases (lowercase) that name one of its values.
VALUE_LEXICON: dict[str, tuple[str, ...]] = {
    "ui theme": (
        "dark mode",
        "light mode",
        "dark theme",
        "light theme",
        "high contrast",
        "color scheme",
        "colour scheme",
        "theme",
    ),
    "programming language": (
        "python",
        "golang",
        "java",
        "kotlin",
        "rust",
        "typescript",
        "javascript",
        "c++",
        "c#",
        "ruby",
        "php",
        "scala",
        "swift",
        "elixir",
        "haskell",
        "node.js",
        "nodejs",
        "deno",
    ),
    "database": (
        "postgresql",
        "postgres",
        "alloydb",
        "mysql",
        "sqlite",
        "mongodb",
        "spanner",
        "cloud sql",
        "firestore",
        "dynamodb",
        "cassandra",
        "database",
    ),
    "backend": (
        "fastapi",
        "django",
        "flask",
        "express",
        "rails",
        "spring boot",
        "nestjs",
        "laravel",
        "backend",
    ),
    "frontend": ("react", "vue", "angular", "svelte", "next.js", "nextjs", "frontend"),
    "cache": ("valkey", "redis", "memcached", "memorystore", "cache"),
    "region": ("region",),
    "editor": (
        "neovim",
        "vim",
        "emacs",
        "vs code",
        "vscode",
        "visual studio code",
        "intellij",
        "pycharm",
        "editor",
        "ide",
    ),
    "indentation": ("tabs", "spaces", "indentation"),
    "package manager": ("uv", "poetry", "pipenv", "npm", "yarn", "pnpm"),
    "test framework": ("pytest", "unittest", "jest", "vitest"),
    "cloud provider": ("gcp", "google cloud", "aws", "azure"),
    "timeout": ("timeout", "timeouts"),
}
# Words that name a facet only as written ("Go" the language, not "go" the verb).
_CASED = {"Go": "programming language"}
# A cloud region ("us-east1", "europe-west4").
_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")

# Subject words that name a facet (the head noun of "the short-term cache").
SUBJECT_FACETS: dict[str, str] = {
    "theme": "ui theme",
    "language": "programming language",
    "runtime": "programming language",
    "database": "database",
    "db": "database",
    "datastore": "database",
    "backend": "backend",
    "frontend": "frontend",
    "cache": "cache",
    "region": "region",
    "editor": "editor",
    "ide": "editor",
    "indentation": "indentation",
}
# Subjects that say nothing of their own: the value names the facet.
_GENERIC_SUBJECTS = word_set(
    "stack framework choice default setup tool tooling platform option pick"
)

_DETERMINERS = word_set(
    "the a an all every each any some this that these those my our your their its user's users"
)
# Words that end a noun phrase.
_PHRASE_END = word_set(
    "with for on in at over than to and or but because when while from by of as "
    "instead rather so which that"
)
_NOT_PLURAL = word_set(
    "kubernetes postgres series status news analysis always tabs spaces alias canvas class"
)

_TOKEN = re.compile(r"[A-Za-z0-9][\w.+#'-]*")

# Phrases by their first word, longest first.
_PHRASES: dict[str, list[tuple[list[str], str]]] = {}
for _facet, _names in VALUE_LEXICON.items():
    for _name in _names:
        _words = _name.split()
        _PHRASES.setdefault(_words[0], []).append((_words, _facet))
for _entries in _PHRASES.values():
    _entries.sort(key=lambda entry: -len(entry[0]))


def tokens(text: str) -> list[str]:
    return [t.rstrip(".'-") for t in _TOKEN.findall(text)]


def singular(word: str) -> str:
    if len(word) <= 3 or not word.isalpha() or word in _NOT_PLURAL:
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def value_facet(text: str) -> str | None:
    """The facet of the first word or phrase of `text` the lexicon knows."""
    words = tokens(text)
    lowered = [w.lower() for w in words]
    for i, word in enumerate(lowered):
        if words[i] in _CASED:
            return _CASED[words[i]]
        if _REGION.match(word):
            return "region"
        for phrase, facet in _PHRASES.get(word, ()):
            if lowered[i : i + len(phrase)] == phrase:
                return facet
    return None


def noun_phrase(text: str, limit: int = 4) -> str:
    """The leading noun phrase of `text`, normalised (see the module docstring)."""
    words = [w.lower() for w in tokens(text)]
    while words and (words[0] in _DETERMINERS or words[0] in _PHRASE_END):
        words.pop(0)
    phrase: list[str] = []
    for word in words:
        if word in _PHRASE_END and phrase:
            break
        phrase.append(word)
        if len(phrase) == limit:
            break
    if phrase:
        phrase[-1] = singular(phrase[-1])
    return " ".join(phrase)


def subject_facet(subject: str, value: str = "") -> str | None:
    """The facet a statement about `subject` (with `value`) names, if any."""
    words = [singular(w.lower()) for w in tokens(subject)]
    for word in reversed(words):
        if word in SUBJECT_FACETS:
            return SUBJECT_FACETS[word]
    if words and words[-1] in _GENERIC_SUBJECTS:
        return value_facet(value)
    return None


def subject_entity(subject: str, value: str = "") -> str:
    """The entity a statement about `subject` (with `value`) is about."""
    return subject_facet(subject, value) or noun_phrase(subject) or value_entity(value)


def value_entity(value: str) -> str:
    """The entity a subjectless statement about `value` is about."""
    return value_facet(value) or noun_phrase(value) or "preference"
