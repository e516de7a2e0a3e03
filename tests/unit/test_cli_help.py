"""Every command and option of `agent-memory` explains itself, and each subcommand's
`--help` shows its own usage and ends with an example."""

import argparse
import shlex

import pytest

from services.cli.main import main
from services.cli.parser import EXAMPLES, build_parser


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser, argparse._SubParsersAction | None]]:
    """Every (sub)command under `parser` with its words and its chooser of subcommands."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions if a.help}
            for name, child in action.choices.items():
                assert name in helped, f"`{' '.join((*path, name))}` has no help line"
                found.append(((*path, name), child, action))
                found += _commands(child, (*path, name))
    return found


def test_every_command_and_option_has_a_help_line():
    missing = [
        f"{' '.join(words)} {action.dest}"
        for words, parser, _ in _commands(build_parser())
        for action in parser._actions
        if not action.help
    ]
    assert missing == []


@pytest.mark.parametrize(
    "words",
    [words for words, _, _ in _commands(build_parser())],
    ids=lambda words: " ".join(words),
)
def test_each_subcommand_help_shows_its_own_usage(capsys, words):
    with pytest.raises(SystemExit) as exited:
        main([*words, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: agent-memory {' '.join(words)} ")
    assert out.endswith(f"example:\n  {EXAMPLES[' '.join(words)]}\n")


def test_worker_kinds_and_topology_actions_keep_their_names():
    parser = build_parser()
    assert parser.parse_args(["worker", "extraction"]).kind == "extraction"
    assert parser.parse_args(["topology", "show"]).action == "show"
    assert vars(parser.parse_args(["config", "reference", "--write"])) == {
        "command": "config",
        "config_command": "reference",
        "write": True,
    }


@pytest.mark.parametrize("words", sorted(EXAMPLES))
def test_each_example_is_a_command_the_parser_takes(words):
    argv = shlex.split(EXAMPLES[words].split(">")[0])
    argv = argv[argv.index("agent-memory") + 1 :]  # after any VAR=value prefix
    assert argv[: len(words.split())] == words.split()
    build_parser().parse_args(argv)
