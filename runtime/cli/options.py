"""The options ``acp`` and ``serve`` share (the runtime's), and the checks that refuse
them before anything heavy is imported or started.

Only what declaring and checking the options needs is imported here: a bad option is
refused at once, and the actors, the provider SDKs and the WebSocket server load later.
"""

from __future__ import annotations

import argparse

from toolprep.messages.modes import MODES
from toolprep.runtime.hosting.assembly import check_options
from toolprep.runtime.hosting.model_routes import DEFAULT_MODELS
from toolprep.runtime.hosting.options import RuntimeOptions
from toolprep.runtime.kernel.compaction import DEFAULT_COMPACT_AT
from toolprep.runtime.kernel.event_loops import EVENT_LOOPS
from toolprep.runtime.kernel.retry import DEFAULT_MAX_RETRY_WAIT
from toolprep.runtime.kernel.session_host import SessionHostError
from toolprep.runtime.mcp.config import DEFAULT_CALL_TIMEOUT_S, DEFAULT_MAX_TOOLS
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES

__all__ = ["check_arguments", "runtime_arguments", "start_errors"]


def runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that shape the runtime, alike for ``acp`` and ``serve``, in the order
    ``--help`` lists them."""
    _model_arguments(parser)
    _tool_arguments(parser)
    _sandbox_arguments(parser)
    _process_arguments(parser)


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    """Which models to stream from, how, and how big a message may be."""
    parser.add_argument(
        "--provider",
        choices=("anthropic", "openai", "replay"),
        default=None,
        help="the model API to stream from (default: anthropic if ANTHROPIC_API_KEY is set, "
        "else openai if OPENAI_API_KEY is set, else the embedded replay provider, which "
        "needs no key and no network)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model name (default: "
        + ", ".join(f"{model} for {name}" for name, model in DEFAULT_MODELS.items())
        + ")",
    )
    parser.add_argument(
        "--fallback-model",
        action="append",
        default=[],
        metavar="M",
        help="model to fall back to when the previous one keeps failing (repeatable; "
        "default: none)",
    )
    parser.add_argument(
        "--context-window",
        type=int,
        default=None,
        metavar="TOKENS",
        help="context size of the models, for the editor's usage display and --compact-at "
        "(default: known per model name, else 128000)",
    )
    parser.add_argument(
        "--compact-at",
        type=float,
        default=DEFAULT_COMPACT_AT,
        metavar="FRACTION",
        help="summarise a session's older messages with the model once a request used this "
        "fraction of the context window, keeping the most recent quarter verbatim; 0 turns "
        f"it off (default {DEFAULT_COMPACT_AT:g})",
    )
    parser.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="provider base URL, e.g. any OpenAI-compatible server with --provider openai "
        "(default: the provider's own API)",
    )
    parser.add_argument(
        "--max-retries",
        type=int,
        default=3,
        metavar="N",
        help="retries per model for failed streams (default 3)",
    )
    parser.add_argument(
        "--max-retry-wait",
        type=float,
        default=DEFAULT_MAX_RETRY_WAIT,
        metavar="SECONDS",
        help="longest wait before a retry; a provider's retry-after beyond it is capped "
        f"(default {DEFAULT_MAX_RETRY_WAIT:g})",
    )
    parser.add_argument(
        "--max-sse-event-bytes",
        type=int,
        default=DEFAULT_MAX_EVENT_BYTES,
        metavar="N",
        help="largest accepted server-sent event from the provider; a bigger one fails "
        "the request without retrying (default 8 MiB)",
    )
    parser.add_argument(
        "--replay",
        default=None,
        metavar="FILE",
        help="replay script for --provider replay (default: the embedded script)",
    )
    parser.add_argument(
        "--max-line-bytes",
        "--max-message-bytes",
        type=int,
        metavar="N",
        default=8 * 1024 * 1024,
        help="largest JSON-RPC message either way: a bigger one received is answered with "
        "an error and skipped, a bigger card sent is cut to fit, with a note (default 8 MiB)",
    )


def _tool_arguments(parser: argparse.ArgumentParser) -> None:
    """What tools may do unasked, what they see of the environment, MCP servers."""
    parser.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="the mode new sessions start in (an editor may switch it): ask = shell "
        "commands and MCP tools that change things ask first; accept_edits = file edits "
        "never ask, shell still does; plan = read-only tools only; auto = nothing asks "
        "(default ask)",
    )
    parser.add_argument(
        "--allow-shell",
        action="store_true",
        help="start sessions in auto mode, where no tool asks for permission (the same as "
        "--mode auto; default: ask the editor before each shell command)",
    )
    parser.add_argument(
        "--scrub-env",
        action="append",
        default=[],
        metavar="NAME",
        help="keep variable NAME out of tool subprocesses (repeatable; also "
        "TOOLPREP_SCRUB_ENV=A,B); provider keys, the serve token and names like "
        "*_TOKEN, *_KEY, *SECRET*, *PASSWORD*, AWS_* are always kept out (default: only those)",
    )
    parser.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="hand variable NAME to tool subprocesses and MCP servers although it looks "
        "like a secret (repeatable; also TOOLPREP_PASS_ENV=A,B); never the provider "
        "credentials or the serve token (default: none)",
    )
    parser.add_argument(
        "--mcp-call-timeout",
        type=float,
        default=DEFAULT_CALL_TIMEOUT_S,
        metavar="SECONDS",
        help="how long a call to a session's MCP server may take before its card fails "
        f"(default {DEFAULT_CALL_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-mcp-tools",
        type=int,
        default=DEFAULT_MAX_TOOLS,
        metavar="N",
        help="tools offered per MCP server of a session; a server listing more has the rest "
        f"left out, with a warning (default {DEFAULT_MAX_TOOLS})",
    )
    parser.add_argument(
        "--trust-mcp-server",
        action="append",
        default=[],
        metavar="NAME",
        help="take the word of the MCP server the client names NAME (its mcpServers entry's "
        "name) that a tool is read-only: such tools then run in plan mode and without asking "
        "in ask mode (repeatable; default: no server is trusted, so its tools ask in ask mode "
        "and are refused in plan mode whatever they claim)",
    )


def _sandbox_arguments(parser: argparse.ArgumentParser) -> None:
    """How shell commands and stdio MCP servers are confined."""
    parser.add_argument(
        "--sandbox",
        choices=("auto", "on", "off"),
        default="auto",
        help="confine shell commands and stdio MCP servers with bubblewrap (bwrap): the "
        "system read-only, only the session's directory writable, a private /tmp, the data "
        "directory, other sessions' directories and credential files (~/.ssh, ~/.aws, ...) "
        "hidden, no network, resource limits. auto = when bwrap works here, saying so when "
        "it does not; on = refuse to start without it; off = run them unconfined "
        "(default auto)",
    )
    parser.add_argument(
        "--sandbox-network",
        action="store_true",
        help="let sandboxed commands and MCP servers use the network (default: none, not "
        "even loopback)",
    )
    parser.add_argument(
        "--sandbox-limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a resource limit of each sandboxed command, per process: processes=N (the "
        "kernel exempts root), memory=MiB (address space), cpu=SECONDS, file=MiB (largest "
        "file written); repeatable (default processes=4096, memory=32768, cpu=3600, "
        "file=16384)",
    )


def _process_arguments(parser: argparse.ArgumentParser) -> None:
    """The event loop, the log, and where (and how durably) sessions are kept."""
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="loop for the provider streams (and serve's connections): uvloop (pip install "
        "'toolprep[uvloop]') lowers tool-card latency under load; auto uses it when installed "
        "(default auto)",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        metavar="LEVEL",
        help="stderr log level: DEBUG, INFO, WARNING, ERROR (default WARNING)",
    )
    persistence = parser.add_mutually_exclusive_group()
    persistence.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="keep sessions (history and the frames sent) in DIR/sessions.db, so that "
        "session/load and session/list work across restarts (default: "
        "$XDG_DATA_HOME/toolprep, else ~/.local/share/toolprep)",
    )
    persistence.add_argument(
        "--no-persist",
        action="store_true",
        help="keep sessions in memory only: nothing is written, nothing can be loaded later "
        "(default: keep them in --data-dir)",
    )
    parser.add_argument(
        "--synchronous",
        choices=("normal", "full"),
        default="normal",
        help="how durable each stored write is: normal = survives the process crashing, "
        "but a power loss or OS crash may lose the last writes; full = survives that too, "
        "at an fsync per write (default normal)",
    )


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


def _check_placement(args: argparse.Namespace) -> None:
    """``--workers`` on one machine, ``--ray`` with ``--shards`` on a cluster: never both."""
    ray = getattr(args, "ray", None)
    if getattr(args, "shards", None) is not None and ray is None:
        raise ValueError("--shards goes with --ray ADDRESS; on one machine use --workers N")
    if ray is not None and args.workers is not None:
        raise ValueError("--workers does not go with --ray: --shards N says how many runtimes run")
