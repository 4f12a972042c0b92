"""The options that shape a runtime, as one frozen value, each declared once.

A runtime option is a field of ``RuntimeOptions`` declared with ``option(...)``: its name
(``fallback_model`` is ``--fallback-model``), its type, its default and its help. Everything
else is derived from that one declaration (``runtime_fields``):

- the ``acp`` and ``serve`` flags (``cli.options.runtime_arguments``): a ``bool`` is a
  switch, a ``tuple[str, ...]`` a repeatable flag, an ``int`` or ``float`` is parsed as one,
  a ``Literal`` offers its values as the choices;
- ``RuntimeOptions.from_arguments``, which reads each from the parsed command line;
- the JSON a worker process or a Ray shard receives them as (``workers.codec.dump_options`` /
  ``load_options``), each value checked against its type on the way in.

So a new option is its declaration here plus the code that uses it, and every process that
serves sessions builds its runtime from exactly what the user gave. The value is checked
once, by ``hosting.assembly.check_options``, before anything heavy is started.
"""

from __future__ import annotations

import argparse
import functools
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Literal, get_args, get_origin

from toolprep.messages.modes import MODES
from toolprep.runtime.hosting.model_routes import DEFAULT_MODELS
from toolprep.runtime.kernel.compaction import DEFAULT_COMPACT_AT
from toolprep.runtime.kernel.event_loops import EVENT_LOOPS
from toolprep.runtime.kernel.retry import DEFAULT_MAX_RETRY_WAIT
from toolprep.runtime.mcp.config import DEFAULT_CALL_TIMEOUT_S, DEFAULT_MAX_TOOLS
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES
from toolprep.runtime.store.connection import DEFAULT_SYNCHRONOUS, Synchronous

__all__ = ["Flag", "RuntimeField", "RuntimeOptions", "option", "runtime_fields"]

_FLAG = "toolprep.flag"
"""The key of a field's ``Flag`` in its dataclass metadata."""


@dataclass(frozen=True, slots=True)
class Flag:
    """How the command line offers one runtime option: its help (which names the default),
    and what ``--help`` shows for its value. The flag itself is the field's name with
    dashes; its kind follows from the field's type."""

    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    """The values accepted, for a ``str`` option (a ``Literal`` one has its own)."""


def option(
    default: Any,
    help: str,
    *,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """Declare a ``RuntimeOptions`` field as an option of ``acp`` and ``serve``."""
    return field(default=default, metadata={_FLAG: Flag(help, metavar, choices)})


@dataclass(frozen=True, slots=True)
class RuntimeField:
    """One field of ``RuntimeOptions`` as the CLI and the worker codec read it.

    ``kind`` is the field's type without ``| None`` (``optional`` says whether None is
    allowed); ``flag`` is None for a field the command line does not set (the front sets
    it for its workers, ``with_front``)."""

    name: str
    kind: Any
    optional: bool
    default: Any
    flag: Flag | None

    @property
    def is_list(self) -> bool:
        """A repeatable option: ``tuple[str, ...]``, a JSON list of text."""
        return get_origin(self.kind) is tuple

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The values a ``Literal`` option or a ``Flag`` with choices accepts."""
        if get_origin(self.kind) is Literal:
            return tuple(get_args(self.kind))
        return self.flag.choices if self.flag is not None else None

    @property
    def cli_name(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """The ``toolprep acp`` / ``serve`` options a runtime is built from; each field is the
    option of that name (``fallback_model`` is ``--fallback-model``, repeated), in the order
    ``--help`` lists them."""

    # Which models to stream from, how, and how big a message may be.
    provider: str | None = option(
        None,
        "the model API to stream from (default: anthropic if ANTHROPIC_API_KEY is set, "
        "else openai if OPENAI_API_KEY is set, else the embedded replay provider, which "
        "needs no key and no network)",
        choices=("anthropic", "openai", "replay"),
    )
    model: str | None = option(
        None,
        "model name (default: "
        + ", ".join(f"{model} for {name}" for name, model in DEFAULT_MODELS.items())
        + ")",
    )
    fallback_model: tuple[str, ...] = option(
        (),
        "model to fall back to when the previous one keeps failing (repeatable; default: none)",
        metavar="M",
    )
    context_window: int | None = option(
        None,
        "context size of the models, for the editor's usage display and --compact-at "
        "(default: known per model name, else 128000)",
        metavar="TOKENS",
    )
    compact_at: float = option(
        DEFAULT_COMPACT_AT,
        "summarise a session's older messages with the model once a request used this "
        "fraction of the context window, keeping the most recent quarter verbatim; 0 turns "
        f"it off (default {DEFAULT_COMPACT_AT:g})",
        metavar="FRACTION",
    )
    base_url: str | None = option(
        None,
        "provider base URL, e.g. any OpenAI-compatible server with --provider openai "
        "(default: the provider's own API)",
        metavar="URL",
    )
    max_retries: int = option(3, "retries per model for failed streams (default 3)", metavar="N")
    max_retry_wait: float = option(
        DEFAULT_MAX_RETRY_WAIT,
        "longest wait before a retry; a provider's retry-after beyond it is capped "
        f"(default {DEFAULT_MAX_RETRY_WAIT:g})",
        metavar="SECONDS",
    )
    max_sse_event_bytes: int = option(
        DEFAULT_MAX_EVENT_BYTES,
        "largest accepted server-sent event from the provider; a bigger one fails "
        "the request without retrying (default 8 MiB)",
        metavar="N",
    )
    replay: str | None = option(
        None,
        "replay script for --provider replay (default: the embedded script)",
        metavar="FILE",
    )
    # What tools may do unasked, what they see of the environment, MCP servers.
    mode: str | None = option(
        None,
        "the mode new sessions start in (an editor may switch it): ask = shell "
        "commands and MCP tools that change things ask first; accept_edits = file edits "
        "never ask, shell still does; plan = read-only tools only; auto = nothing asks "
        "(default ask)",
        choices=MODES,
    )
    allow_shell: bool = option(
        False,
        "start sessions in auto mode, where no tool asks for permission (the same as "
        "--mode auto; default: ask the editor before each shell command)",
    )
    scrub_env: tuple[str, ...] = option(
        (),
        "keep variable NAME out of tool subprocesses (repeatable; also "
        "TOOLPREP_SCRUB_ENV=A,B); provider keys, the serve token and names like "
        "*_TOKEN, *_KEY, *SECRET*, *PASSWORD*, AWS_* are always kept out (default: only those)",
        metavar="NAME",
    )
    pass_env: tuple[str, ...] = option(
        (),
        "hand variable NAME to tool subprocesses and MCP servers although it looks "
        "like a secret (repeatable; also TOOLPREP_PASS_ENV=A,B); never the provider "
        "credentials or the serve token (default: none)",
        metavar="NAME",
    )
    mcp_call_timeout: float | None = option(
        DEFAULT_CALL_TIMEOUT_S,
        "how long a call to a session's MCP server may take before its card fails "
        f"(default {DEFAULT_CALL_TIMEOUT_S:g})",
        metavar="SECONDS",
    )
    max_mcp_tools: int | None = option(
        DEFAULT_MAX_TOOLS,
        "tools offered per MCP server of a session; a server listing more has the rest "
        f"left out, with a warning (default {DEFAULT_MAX_TOOLS})",
        metavar="N",
    )
    trust_mcp_server: tuple[str, ...] = option(
        (),
        "take the word of the MCP server the client names NAME (its mcpServers entry's "
        "name) that a tool is read-only: such tools then run in plan mode and without asking "
        "in ask mode (repeatable; default: no server is trusted, so its tools ask in ask mode "
        "and are refused in plan mode whatever they claim)",
        metavar="NAME",
    )
    # How shell commands and stdio MCP servers are confined.
    sandbox: str = option(
        "auto",
        "confine shell commands and stdio MCP servers with bubblewrap (bwrap): the "
        "system read-only, only the session's directory writable, a private /tmp, the data "
        "directory, other sessions' directories and credential files (~/.ssh, ~/.aws, ...) "
        "hidden, no network, resource limits. auto = when bwrap works here, saying so when "
        "it does not; on = refuse to start without it; off = run them unconfined "
        "(default auto)",
        choices=("auto", "on", "off"),
    )
    sandbox_network: bool = option(
        False,
        "let sandboxed commands and MCP servers use the network (default: none, not even loopback)",
    )
    sandbox_limit: tuple[str, ...] = option(
        (),
        "a resource limit of each sandboxed command, per process: processes=N (the "
        "kernel exempts root), memory=MiB (address space), cpu=SECONDS, file=MiB (largest "
        "file written); repeatable (default processes=4096, memory=32768, cpu=3600, "
        "file=16384)",
        metavar="NAME=VALUE",
    )
    # The event loop, the log, and where (and how durably) sessions are kept.
    event_loop: str = option(
        "auto",
        "loop for the provider streams (and serve's connections): uvloop (pip install "
        "'toolprep[uvloop]') lowers tool-card latency under load; auto uses it when installed "
        "(default auto)",
        choices=EVENT_LOOPS,
    )
    log_level: str = option(
        "WARNING",
        "stderr log level: DEBUG, INFO, WARNING, ERROR (default WARNING)",
        metavar="LEVEL",
    )
    data_dir: str | None = option(
        None,
        "keep sessions (history and the frames sent) in DIR/sessions.db, so that "
        "session/load and session/list work across restarts (default: "
        "$XDG_DATA_HOME/toolprep, else ~/.local/share/toolprep)",
        metavar="DIR",
    )
    synchronous: Synchronous = option(  # noqa: RUF009 - option() is dataclasses.field
        DEFAULT_SYNCHRONOUS,
        "how durable each stored write is: normal = survives the process crashing, "
        "but a power loss or OS crash may lose the last writes; full = survives that too, "
        "at an fsync per write (default normal)",
    )
    # Set by the front for its workers (``with_front``), not by a flag.
    store_owner: str | None = None
    """Whose name the runtime owns stored sessions under (the front's, for its workers)."""
    mcp_policy: McpPolicy = field(default_factory=McpPolicy)
    """Which MCP servers clients may name; the default allows none."""

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> RuntimeOptions:
        """The runtime options of a parsed ``acp`` or ``serve`` command line."""
        chosen: dict[str, Any] = {}
        for declared in runtime_fields():
            if declared.flag is None:
                continue
            value = getattr(args, declared.name)
            chosen[declared.name] = tuple(value or ()) if declared.is_list else value
        return cls(**chosen)

    def with_front(self, store_owner: str, mcp_policy: McpPolicy) -> RuntimeOptions:
        """These options as the front gives them to its workers."""
        return replace(self, store_owner=store_owner, mcp_policy=mcp_policy)


@functools.cache
def runtime_fields() -> tuple[RuntimeField, ...]:
    """Every field of ``RuntimeOptions``, in declaration order, with its resolved type."""
    hints = typing.get_type_hints(RuntimeOptions)
    found = []
    for declared in fields(RuntimeOptions):
        kind, optional = _without_none(hints[declared.name])
        default = (
            declared.default_factory()
            if declared.default_factory is not MISSING
            else declared.default
        )
        flag = declared.metadata.get(_FLAG)
        found.append(RuntimeField(declared.name, kind, optional, default, flag))
    return tuple(found)


def _without_none(hint: Any) -> tuple[Any, bool]:
    """``X`` and whether None is allowed, for a hint ``X`` or ``X | None``."""
    if get_origin(hint) in (types.UnionType, typing.Union):
        rest = [arg for arg in get_args(hint) if arg is not types.NoneType]
        if len(rest) != 1:
            raise TypeError(f"a runtime option has one type besides None, not {hint!r}")
        return rest[0], True
    return hint, False
