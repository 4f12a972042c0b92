"""The agent's runtime, built from its command-line options.

``toolprep acp`` builds it in its own process with ``--workers 1``, and each
worker process builds the very same one from the same ``RuntimeOptions``
(passed as JSON), so a session behaves alike whichever process serves it.

Importing this module is cheap: the CLI checks its options with it before
anything heavy is loaded, so a bad option is refused at once. What a runtime
is built from (actors, tools, the store) is imported by ``runtime_from_options``.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolprep.messages.modes import DEFAULT_MODE, SessionMode, check_mode
from toolprep.runtime.hosting.model_routes import ProviderConfig, resolve_provider_config
from toolprep.runtime.hosting.options import RuntimeOptions
from toolprep.runtime.hosting.tool_environment import passed_variable_names, scrubbed_variable_names
from toolprep.runtime.kernel.compaction import check_compact_at
from toolprep.runtime.kernel.event_loops import check_event_loop
from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver

if TYPE_CHECKING:
    from toolprep.runtime.hosting.runtime import Runtime
    from toolprep.runtime.tools.environment import EnvironmentPolicy
    from toolprep.runtime.tools.sandbox import Sandbox, SandboxStatus

logger = logging.getLogger(__name__)

STORE_FILE = "sessions.db"


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s",
    )


def check_options(options: RuntimeOptions) -> None:
    """Raise ``ValueError`` / ``OSError`` now for options no runtime could be built from."""
    settings = _settings(options)
    environment_policy(options, settings)
    check_compact_at(options.compact_at)
    starting_mode(options)
    check_event_loop(options.event_loop)
    check_sandbox_options(options)
    timeout = options.mcp_call_timeout
    if timeout is not None and not timeout > 0:
        raise ValueError(f"--mcp-call-timeout must be > 0, got {timeout}")
    max_tools = options.max_mcp_tools
    if max_tools is not None and max_tools < 1:
        raise ValueError(f"--max-mcp-tools must be >= 1, got {max_tools}")
    if any(not name for name in options.trust_mcp_server):
        raise ValueError(
            "--trust-mcp-server needs a server name, as the client's mcpServers names it"
        )
    if settings.provider == "replay":
        from toolprep.runtime.providers.replay_script import ReplayScript

        ReplayScript.load(settings.replay_file)  # the script must exist and parse
    else:
        from toolprep.runtime.providers.sdks import check_provider_key

        check_provider_key(settings.provider, api_key=settings.api_key, base_url=settings.base_url)


def starting_mode(options: RuntimeOptions) -> SessionMode:
    """The mode new sessions start in: ``--mode``, else ``auto`` under ``--allow-shell``,
    else ``ask``. ``--allow-shell`` with another ``--mode`` is a ``ValueError``."""
    chosen = options.mode
    if options.allow_shell:
        if chosen not in (None, "auto"):
            raise ValueError(
                f"--allow-shell starts sessions in auto mode; it contradicts --mode {chosen}"
            )
        return "auto"
    return DEFAULT_MODE if chosen is None else check_mode(chosen)


def default_data_dir() -> Path:
    """Where sessions are kept unless told otherwise: the XDG data directory."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "toolprep"


def store_path(options: RuntimeOptions) -> Path | None:
    """Where sessions are kept (``--data-dir``), or None to keep them in memory only."""
    data_dir = options.data_dir
    return Path(data_dir).expanduser().resolve() / STORE_FILE if data_dir else None


def runtime_from_options(
    options: RuntimeOptions, *, observer: TurnObserver = NO_OBSERVER
) -> Runtime:
    """The CLI's runtime, and (through ``worker_runtime_from_options``) a worker's;
    ``observer`` watches its turns (telemetry).

    With ``data_dir`` the runtime journals its sessions into the store there;
    several processes (the workers) share that file, each writing the
    sessions it serves. ``store_owner`` (set by the front for its workers)
    is the name they own sessions under: the front's, so that ownership
    follows the process the user started, and the front may delete what
    its own workers served.
    """
    from toolprep.runtime.hosting.model_routes import build_routes
    from toolprep.runtime.hosting.runtime import Runtime, RuntimeConfig
    from toolprep.runtime.kernel.compaction import CompactionPolicy
    from toolprep.runtime.kernel.retry import RetryPolicy
    from toolprep.runtime.mcp.config import DEFAULT_CALL_TIMEOUT_S, DEFAULT_MAX_TOOLS, McpConfig
    from toolprep.runtime.store import SessionStore
    from toolprep.runtime.tools.config import ToolConfig
    from toolprep.runtime.tools.hidden_paths import HiddenPaths
    from toolprep.runtime.tools.registry import default_registry
    from toolprep.runtime.tools.shell import RunShellCommandTool

    configure_logging(options.log_level)
    settings = _settings(options)
    routes = build_routes(settings)
    # Shell permission follows each session's mode (--allow-shell starts them in auto).
    environment = environment_policy(options, settings)
    # Every tool masks the secrets; the file tools keep out of the data directory and
    # the credential files.
    tool_config = ToolConfig(
        environment=environment, hidden_paths=HiddenPaths.for_agent(data_dir=options.data_dir)
    )
    registry = default_registry(tool_config)
    sandbox = sandbox_from_options(options)
    registry.register(
        RunShellCommandTool(tool_config, environment=environment, sandbox=sandbox), replace=True
    )
    retry = RetryPolicy(max_retries=settings.max_retries, max_delay=settings.max_retry_wait)
    path = store_path(options)
    store = (
        SessionStore(path, owner=options.store_owner, synchronous=options.synchronous)
        if path is not None
        else None
    )
    # MCP servers inherit what shell commands inherit: no secrets.
    mcp = McpConfig(
        call_timeout_s=options.mcp_call_timeout or DEFAULT_CALL_TIMEOUT_S,
        max_tools=options.max_mcp_tools or DEFAULT_MAX_TOOLS,
        trusted_servers=frozenset(options.trust_mcp_server),
        environment=environment,
        policy=options.mcp_policy,
        sandbox=sandbox,
    )
    compact_at = check_compact_at(options.compact_at)
    config = RuntimeConfig(
        retry=retry,
        event_loop=check_event_loop(options.event_loop),
        compaction=CompactionPolicy(at=compact_at),
        default_mode=starting_mode(options),
        session_notice=sandbox_status(options).notice(),
    )
    runtime = Runtime(routes, registry, config, store=store, mcp=mcp, observer=observer)
    if sandbox is not None:
        sandbox.session_directories = runtime.session_directories
    return runtime


def worker_runtime_from_options(raw: Any) -> Runtime:
    """A worker's runtime factory (``WorkerSpec.factory``): ``runtime_from_options`` for
    the options in ``raw`` (``dump_options``' JSON), ready once its provider is built.

    The front waits for every worker to be ready before it serves anyway, so the
    import costs no reply; and sessions spread over workers then all start
    streaming alike, instead of one worker's first stream waiting on its import
    while another worker's sessions are already at their second request.
    """
    from toolprep.runtime.providers.deferred import DeferredProvider
    from toolprep.runtime.telemetry.setup import WORKER_METRICS_VARIABLE, telemetry_from_environ
    from toolprep.runtime.workers.codec import load_options

    # Each worker (or Ray shard) exports its own spans and metrics, as the OTEL_* variables
    # it inherited say, flushed when it exits.
    front_reads = os.environ.get(WORKER_METRICS_VARIABLE) == "1"
    telemetry = telemetry_from_environ(prometheus=front_reads, role="worker")
    atexit.register(telemetry.shutdown)
    runtime = runtime_from_options(load_options(raw), observer=telemetry.observer)
    for route in runtime.routes:
        if isinstance(route.provider, DeferredProvider):
            route.provider.resolve()  # the SDK client is built before any stream loop runs
    return runtime


def check_sandbox_options(options: RuntimeOptions) -> None:
    """Refuse a bad ``--sandbox`` or ``--sandbox-limit``, and ``--sandbox on`` where no
    sandbox can be had. Only ``on`` probes ``bwrap`` here: under ``auto`` a missing
    sandbox is reported, not refused, so the probe waits for the runtime."""
    from toolprep.runtime.tools.sandbox import check_sandbox_mode, parse_limits

    parse_limits(options.sandbox_limit)
    if check_sandbox_mode(options.sandbox) == "on":
        sandbox_status(options)


def sandbox_status(options: RuntimeOptions) -> SandboxStatus:
    """Whether this runtime's commands run sandboxed (``--sandbox``); probes ``bwrap``
    once per process. ``ValueError`` for ``--sandbox on`` where no sandbox can be had,
    and for a bad ``--sandbox-limit``."""
    from toolprep.runtime.tools.sandbox import (
        SandboxStatus,
        check_sandbox_mode,
        parse_limits,
        probe,
    )

    parse_limits(options.sandbox_limit)
    mode = check_sandbox_mode(options.sandbox)
    if mode == "off":
        return SandboxStatus("off", "--sandbox off", network=True)
    found = probe()
    if found.state != "on":
        if mode == "on":
            raise ValueError(f"--sandbox on, but no sandbox can be had: {found.reason}")
        return found
    return SandboxStatus("on", network=options.sandbox_network, bwrap=found.bwrap)


def announce_sandbox(options: RuntimeOptions) -> SandboxStatus:
    """``sandbox_status``, with one log line when commands run unconfined against the
    default (the process that serves the client calls it once)."""
    status = sandbox_status(options)
    if status.state == "unavailable":
        logger.warning(
            "no sandbox: shell commands and MCP servers run with this process's rights (%s)",
            status.reason,
        )
    return status


def sandbox_from_options(options: RuntimeOptions) -> Sandbox | None:
    """The sandbox commands run in, or None when they run unconfined."""
    from toolprep.runtime.tools.sandbox import (
        Sandbox,
        credential_paths,
        find_prlimit,
        parse_limits,
    )

    status = sandbox_status(options)
    if status.state != "on" or status.bwrap is None:
        return None
    hidden = [default_data_dir(), *credential_paths(Path.home(), os.environ)]
    if options.data_dir:
        hidden.append(Path(options.data_dir).expanduser())
    return Sandbox(
        status.bwrap,
        network=options.sandbox_network,
        limits=parse_limits(options.sandbox_limit),
        hidden=tuple(hidden),
        prlimit=find_prlimit(),
    )


def environment_policy(options: RuntimeOptions, settings: ProviderConfig) -> EnvironmentPolicy:
    """What tools and MCP servers inherit of this process's environment (``--scrub-env``,
    ``--pass-env``); raises ``ValueError`` for a variable that may not be passed."""
    from toolprep.runtime.tools.environment import EnvironmentPolicy

    return EnvironmentPolicy.for_agent(
        configured_key=settings.api_key,
        base_url=settings.base_url,
        names=scrubbed_variable_names(options.scrub_env),
        passed=passed_variable_names(options.pass_env),
    )


def _settings(options: RuntimeOptions) -> ProviderConfig:
    return resolve_provider_config(
        provider=options.provider,
        model=options.model,
        fallback_models=options.fallback_model,
        base_url=options.base_url,
        max_retries=options.max_retries,
        replay_file=options.replay,
        max_sse_event_bytes=options.max_sse_event_bytes,
        max_retry_wait=options.max_retry_wait,
        context_window=options.context_window,
    )
