"""Writes the blocking client from the asyncio one: shared/client/sync*.py from
shared/client/aio*.py, so the client's methods, their signatures and docstrings
are written once.

A rewrite of the source's tokens, as psycopg's tools/async_to_sync.py does with
its syntax tree, but keeping every comment and line as written: `async` and
`await` are dropped, and the asyncio names become their blocking twins wherever
they appear, docstrings and comments included (`AsyncX` is `X`, `aclose` is
`close`, `aio_x` is `sync_x`, `asyncio` is `time`). ruff then sorts the imports,
writes an async generator's loop as `yield from`, and lays the module out. The
module docstring is replaced by one saying where the module comes from.

    .venv/bin/python -m tools.client_sync [--check]        (or `make client`)
"""

from __future__ import annotations

import argparse
import io
import re
import textwrap
import tokenize

from tools.codegen import COMMAND, REPO, ruff, write

CLIENT = REPO / "shared" / "client"
# Each source and the module written from it; a module imports only earlier ones.
MODULES = {
    "aio_connection.py": "sync_connection.py",
    "aio_memories.py": "sync_memories.py",
    "aio_entities.py": "sync_entities.py",
    "aio_profiles.py": "sync_profiles.py",
    "aio.py": "sync.py",
}

_TWINS = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__", "asyncio": "time"}
_WORD = re.compile(r"\bAsync(?=[A-Z])|\baio(?=\b|_)|\b(?:" + "|".join(_TWINS) + r")\b")


def blocking_names(text: str) -> str:
    """`text` with each asyncio name replaced by its blocking twin."""
    return _WORD.sub(
        lambda found: _TWINS.get(found[0], "" if found[0] == "Async" else "sync"), text
    )


def unasync(source: str, name: str) -> str:
    """The blocking module written from the asyncio module `source` (file `name`)."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    docstring = next(t for t in tokens if t.type not in _PREAMBLE)
    assert docstring.type == tokenize.STRING, f"{name} has no module docstring"
    edits = [(offset(docstring.start), offset(docstring.end), _docstring(docstring.string, name))]
    for token, following in zip(tokens, tokens[1:], strict=False):
        start, end = offset(token.start), offset(token.end)
        if token.type == tokenize.NAME and token.string in ("async", "await"):
            # Up to the next token: the keyword and the space after it.
            edits.append((start, offset(following.start), ""))
        elif token is not docstring and token.type in _RENAMED:
            edits.append((start, end, blocking_names(token.string)))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    header = (
        f"# Generated from shared/client/{name} by `{COMMAND}` (tools/client_sync.py).\n"
        f"# Do not edit: change shared/client/{name} and run `{COMMAND}`.\n"
    )
    # I: the imports in order again; UP028: `for x in y: yield x` as `yield from y`,
    # a fix ruff calls unsafe only for generators that are sent values (these are not).
    return ruff(header + source, CLIENT / MODULES[name], fix=("I", "UP028"), unsafe=True)


_PREAMBLE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING}
_RENAMED = {tokenize.NAME, tokenize.STRING, tokenize.COMMENT}


def _docstring(original: str, name: str) -> str:
    summary = blocking_names(original.strip('"').strip().split("\n\n")[0])
    origin = f"Generated from {name}, the asyncio client, by `{COMMAND}`: edit that module."
    return f'"""{summary}\n\n{textwrap.fill(origin, 88)}\n"""'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether they are current")
    args = parser.parse_args(argv)
    current = [
        write(
            CLIENT / target,
            unasync((CLIENT / source).read_text(encoding="utf-8"), source),
            args.check,
        )
        for source, target in MODULES.items()
    ]
    return 0 if all(current) or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
