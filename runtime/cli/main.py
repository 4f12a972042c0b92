"""The ``toolprep`` command: its parser, made of each command's, and ``main``, which
protects the process and hands the parsed options to the command named."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from toolprep.runtime.cli.acp import add_acp_command, run_acp
from toolprep.runtime.cli.connect import add_connect_command, run_connect_command
from toolprep.runtime.cli.demo import add_demo_command, run_demo_command
from toolprep.runtime.cli.serve import add_serve_command, run_serve

__all__ = ["RAY_NATIVE_VARIABLES", "build_parser", "main"]

_DESCRIPTION = (
    "toolprep: a coding agent for editors that speak ACP (Agent Client Protocol). "
    "Tool calls show up in the editor while the model is still writing their arguments."
)

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "acp": run_acp,
    "serve": run_serve,
    "connect": run_connect_command,
    "demo": run_demo_command,
}
"""What runs each command, by the name ``build_parser`` gives it."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolprep", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    add_acp_command(sub)
    add_serve_command(sub)
    add_connect_command(sub)
    add_demo_command(sub)
    return parser


RAY_NATIVE_VARIABLES = ("RAY_AUTH_TOKEN",)
"""Secrets ``serve --ray`` leaves in its C environment: Ray's native code reads them there."""


def _protect(args: argparse.Namespace) -> None:
    """``protect_process`` before anything is started: no other process of the user reads
    this one's memory, and its environment block and command line hold no secret."""
    from toolprep.runtime.hosting.tool_environment import scrubbed_variable_names
    from toolprep.runtime.process.secrets import protect_process
    from toolprep.runtime.tools.environment import url_password

    try:
        scrubbed = scrubbed_variable_names(getattr(args, "scrub_env", ()))
    except ValueError:  # refused with its message once the options are checked
        scrubbed = frozenset()
    password = url_password(getattr(args, "base_url", None))
    # Ray's native client reads the cluster's token with getenv when it connects.
    kept = RAY_NATIVE_VARIABLES if getattr(args, "ray", None) is not None else ()
    protect_process(scrubbed=scrubbed, command_line=[password] if password else [], kept=kept)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: this process's arguments) names; its exit status."""
    args = build_parser().parse_args(argv)
    _protect(args)
    return _COMMANDS[args.command](args)
