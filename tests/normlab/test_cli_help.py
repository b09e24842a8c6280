"""Every `normlab` subcommand (and its own subcommands) prints its --help and exits 0: argparse formats
help strings with %, so a literal percent sign in prose crashes --help unless it is escaped."""

from __future__ import annotations

import argparse

import pytest

from normlab.cli import build_parser


def _commands(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
    found = [prefix]
    for action in parser._actions:  # argparse keeps its subparsers here; there is no public accessor
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, [*prefix, name])
    return found


COMMANDS = _commands(build_parser(), [])


def test_the_walk_finds_the_subcommands():
    names = {" ".join(c) for c in COMMANDS}
    assert {"fork", "up", "run"} <= names


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda c: " ".join(c) or "normlab")
def test_help_prints(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*argv, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: normlab")


def test_fork_help_keeps_the_percent_sign(capsys):
    from normlab.cli.fork import OPTIONS
    from normlab_client.spec import RunSpec

    with pytest.raises(SystemExit):
        build_parser().parse_args(["fork", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    with_percent = [RunSpec.model_fields[n].description or "" for n in OPTIONS]
    with_percent = [" ".join(d.split()) for d in with_percent if "%" in d]
    assert with_percent  # (else this test would check nothing: a spec description with a % sign)
    for text in with_percent:
        assert text[:60] in shown
