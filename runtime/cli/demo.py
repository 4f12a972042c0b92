"""``toolprep demo``: one scripted session through the agent, shown as an editor would."""

from __future__ import annotations

import argparse

__all__ = ["add_demo_command", "run_demo_command"]

_DEMO_DESCRIPTION = (
    "Start the agent on the embedded replay provider and drive one scripted session "
    "through it, printing what an editor would show."
)


def add_demo_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="drive one scripted session through the agent and show it",
        description=_DEMO_DESCRIPTION,
    )
    demo.add_argument(
        "--json",
        action="store_true",
        help="print the raw frames instead (default: a readable transcript)",
    )
    demo.add_argument(
        "--replay",
        default=None,
        metavar="FILE",
        help="replay script to use (default: the embedded script)",
    )


def run_demo_command(args: argparse.Namespace) -> int:
    from toolprep.runtime.cli.demo_session import run_demo

    return run_demo(json_output=args.json, replay_file=args.replay)
