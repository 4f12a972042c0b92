"""The options ``acp`` and ``serve`` share (the runtime's, as ``hosting.options`` declares
them), and the checks that refuse them before anything heavy is imported or started.

Only what declaring and checking the options needs is imported here: a bad option is
refused at once, and the actors, the provider SDKs and the WebSocket server load later.
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Callable
from typing import Any

from toolprep.runtime.hosting.assembly import check_options
from toolprep.runtime.hosting.options import RuntimeField, RuntimeOptions, runtime_fields
from toolprep.runtime.kernel.session_host import SessionHostError

__all__ = ["check_arguments", "runtime_arguments", "start_errors"]


def runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that shape the runtime, alike for ``acp`` and ``serve``: one flag per
    declared runtime option (``hosting.options``), in the order ``--help`` lists them, with
    the command line's own flags beside the option they belong with."""
    for declared in runtime_fields():
        if declared.flag is None:
            continue
        beside = _BESIDE.get(declared.name)
        if beside is None:
            _add_option(parser, declared)
        else:
            beside(parser, functools.partial(_add_option, field=declared))


def _add_option(container: _Container, field: RuntimeField) -> None:
    """The flag of one runtime option; its kind follows from the option's type."""
    assert field.flag is not None
    settings: dict[str, Any] = {"default": field.default, "help": field.flag.help}
    if field.kind is bool:
        settings["action"] = "store_true"
    elif field.is_list:
        settings.update(action="append", default=[])
    elif field.kind in (int, float):
        settings["type"] = field.kind
    if field.choices is not None:
        settings["choices"] = field.choices
    if field.flag.metavar is not None:
        settings["metavar"] = field.flag.metavar
    container.add_argument(field.cli_name, **settings)


_Container = argparse.ArgumentParser | argparse._MutuallyExclusiveGroup
_AddOption = Callable[[_Container], None]


def _then_message_limit(parser: argparse.ArgumentParser, add_option: _AddOption) -> None:
    """The option, then the transport's message limit (not a runtime option: the
    connection applies it, not the runtime)."""
    add_option(parser)
    parser.add_argument(
        "--max-line-bytes",
        "--max-message-bytes",
        type=int,
        metavar="N",
        default=8 * 1024 * 1024,
        help="largest JSON-RPC message either way: a bigger one received is answered with "
        "an error and skipped, a bigger card sent is cut to fit, with a note (default 8 MiB)",
    )


def _or_no_persist(parser: argparse.ArgumentParser, add_option: _AddOption) -> None:
    """``--data-dir`` or ``--no-persist``, never both (``--no-persist`` leaves the data
    directory unset: ``cli.hosting`` fills in the default one otherwise)."""
    persistence = parser.add_mutually_exclusive_group()
    add_option(persistence)
    persistence.add_argument(
        "--no-persist",
        action="store_true",
        help="keep sessions in memory only: nothing is written, nothing can be loaded later "
        "(default: keep them in --data-dir)",
    )


_BESIDE: dict[str, Callable[[argparse.ArgumentParser, _AddOption], None]] = {
    "replay": _then_message_limit,
    "data_dir": _or_no_persist,
}
"""The runtime options the command line adds a flag of its own beside, and how."""


def start_errors() -> tuple[type[Exception], ...]:
    """What building the host raises for options or files it cannot start from."""
    from toolprep.runtime.store import StoreError

    return (ValueError, OSError, SessionHostError, StoreError)


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` or ``OSError`` for ``acp``/``serve`` options nothing could start
    from, before anything heavy is imported or started, so a refusal comes at once."""
    _check_bounds(args)
    _check_placement(args)
    check_options(RuntimeOptions.from_arguments(args))


def _check_bounds(args: argparse.Namespace) -> None:
    """Counts, sizes, the port and the grace period within their ranges."""
    for name, least in (("workers", 1), ("shards", 1), ("max_sessions", 1)):
        value = getattr(args, name, None)
        if value is not None and value < least:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {least}, got {value}")
    if args.max_line_bytes < 1:
        raise ValueError(f"--max-line-bytes must be >= 1, got {args.max_line_bytes}")
    port = getattr(args, "port", None)
    if port is not None and not 0 <= port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {port}")
    grace = getattr(args, "disconnect_grace", None)
    if grace is not None and not grace >= 0:  # also rejects NaN
        raise ValueError(f"--disconnect-grace must be >= 0 seconds, got {grace}")
    retain = getattr(args, "retain_days", None)
    if retain is not None and not (retain > 0 and math.isfinite(retain)):
        raise ValueError(f"--retain-days must be > 0 days, got {retain}")
    idle = getattr(args, "idle_evict", None)
    if idle is not None and not idle >= 0:  # also rejects NaN
        raise ValueError(f"--idle-evict must be >= 0 seconds, got {idle}")
    cache = getattr(args, "frame_cache_bytes", None)
    if cache is not None and cache < 0:
        raise ValueError(f"--frame-cache-bytes must be >= 0, got {cache}")
    detached = getattr(args, "max_detached", None)
    if detached is not None and not (detached > 0 and math.isfinite(detached)):
        raise ValueError(f"--max-detached must be > 0 seconds, got {detached}")


def _check_placement(args: argparse.Namespace) -> None:
    """``--workers`` on one machine, ``--ray`` with ``--shards`` on a cluster: never both."""
    ray = getattr(args, "ray", None)
    if getattr(args, "shards", None) is not None and ray is None:
        raise ValueError("--shards goes with --ray ADDRESS; on one machine use --workers N")
    if ray is not None and args.workers is not None:
        raise ValueError("--workers does not go with --ray: --shards N says how many runtimes run")
