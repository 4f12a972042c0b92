"""``--help`` speaks plain text, describes each command and names every default."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from toolprep.runtime.cli.main import build_parser
from toolprep.runtime.hosting.model_routes import DEFAULT_MODELS

COMMANDS: tuple[list[str], ...] = ([], ["acp"], ["serve"], ["demo"])


def _help(*command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "toolprep.runtime.cli", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "toolprep")
def test_help_is_plain_text_with_a_description(command: list[str]) -> None:
    text = _help(*command)
    assert "``" not in text  # no RST markup leaks from docstrings
    before_options = text.split("\noptions:", 1)[0]
    usage, _, description = before_options.partition("\n\n")
    assert usage.startswith("usage: toolprep")
    assert len(description.split()) >= 10, f"no description in:\n{text}"


@pytest.mark.parametrize("name", ["acp", "serve", "demo"])
def test_every_option_names_its_default(name: str) -> None:
    parser = _subparsers()[name]
    silent = [
        action.option_strings[0]
        for action in parser._actions
        if action.option_strings
        and not isinstance(action, argparse._HelpAction)
        and action.help != argparse.SUPPRESS  # hidden: only there to be refused by name
        and "default" not in (action.help or "")
    ]
    assert silent == []


@pytest.mark.parametrize("name", ["acp", "serve"])
def test_model_help_names_the_default_model_of_each_provider(name: str) -> None:
    (model,) = [a for a in _subparsers()[name]._actions if "--model" in a.option_strings]
    for provider, default in DEFAULT_MODELS.items():
        assert f"{default} for {provider}" in (model.help or "")
