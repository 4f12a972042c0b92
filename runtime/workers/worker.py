"""A worker process: one whole ``Runtime`` serving the sessions its front routes to it.

Run as ``python -m toolprep.runtime.workers.worker FACTORY``: FACTORY
names a function (``package.module:function``) that builds the runtime from
the config of the first frame on stdin (``start``), so a worker runs exactly the tools
and providers its front's owner configured. That frame also carries the secrets of
the front's environment (the provider key, the serve token), which are kept out of the
worker's environment and command line, where other processes of the user could read
them (``process_secrets``). Commands arrive on stdin and frames leave on stdout
(``wire``); stdout carries nothing else. The worker ends when its front
says so or goes away (stdin closes): either way every running turn is
cancelled first, so its cards get their terminal updates. Should the front
die outright, the worker kills its tool processes and exits at once
(``front_death``), so no tool call starts that nobody would see.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import IO, Any, assert_never

import orjson

from toolprep.messages.content import Part
from toolprep.messages.frames import card_change
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.hosting.runtime import Runtime
from toolprep.runtime.kernel.session_host import (
    ClientRequest,
    EditorCapabilities,
    HostClosed,
    SessionConfig,
    SessionServedElsewhere,
    StoreReadOnly,
    UnknownModel,
    UnknownSession,
)
from toolprep.runtime.mcp.policy import McpRefused
from toolprep.runtime.mcp.specs import McpServerSpec
from toolprep.runtime.process.secrets import hold_secret, protect_process
from toolprep.runtime.process.stop_signals import dump_stacks_on_signal
from toolprep.runtime.process.tuning import tune_process_for_daemon
from toolprep.runtime.telemetry.setup import process_metrics_text
from toolprep.runtime.workers.front_death import FrontWatch
from toolprep.runtime.workers.protocol import (
    AnswerEditor,
    AnswerPermission,
    Cancel,
    Close,
    Command,
    ConfigReturned,
    ErrorKind,
    Event,
    FlushJournal,
    Open,
    OpenHow,
    Prompt,
    ProtocolError,
    Raised,
    ReadMetrics,
    Ready,
    Requested,
    Returned,
    ServedElsewhereRaised,
    SetMode,
    SetModel,
    ShowConfig,
    Shutdown,
    ToolGroupChanged,
    TurnEnded,
    UnknownModelRaised,
    Updated,
    decode_command,
    encode_event,
)
from toolprep.runtime.workers.transport import FrameOutput
from toolprep.runtime.workers.wire import FrameReader, FrameWriter, WireError, encode_frames

logger = logging.getLogger(__name__)

__all__ = ["EventWriter", "PipeSink", "RuntimeFactory", "WorkerLoop", "load_factory", "main"]

RuntimeFactory = Callable[[Any], Runtime]


class PipeSink:
    """The ``FrameSink`` of every session of this worker: frames on their way to the front."""

    def __init__(self, writer: FrameOutput) -> None:
        self._writer = writer

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        self._writer.write(_updated(session_id, update))

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """A batch of frames of any of this worker's sessions, in one write to the front."""
        self._writer.write_many([_updated(session_id, update) for session_id, update in frames])

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        card = card_change(orjson.loads(update_json))
        self._writer.write(Updated(session_id, card, update_json))

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        self._writer.write(Requested(session_id, request))


def _updated(session_id: str, update: dict[str, Any]) -> Updated:
    """A frame built here, serialised once for the front to relay as it is."""
    return Updated(session_id, card_change(update), orjson.dumps(update))


class EventWriter:
    """The ``FrameOutput`` of a worker process: each event as one frame on its stdout."""

    def __init__(self, frames: FrameWriter) -> None:
        self._frames = frames

    def write(self, event: Event) -> None:
        self._frames.write(*encode_event(event))

    def write_many(self, events: Sequence[Event]) -> None:
        self._frames.write_encoded(encode_frames(map(encode_event, events)))


def load_factory(spec: str) -> RuntimeFactory:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"a runtime factory is named 'package.module:function', not {spec!r}")
    factory = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(factory):
        raise ValueError(f"{spec} is not a callable that builds a runtime")
    built: RuntimeFactory = factory
    return built


class WorkerLoop:
    """Carries out the front's commands on the runtime, whichever way they travel: read
    from a pipe (``run``), or handed over one call each (``step``, as a Ray shard does).

    A command that names something that is not there (a session, a request) is answered
    with the error; one that is not a command at all (``ProtocolError``) ends the worker.
    """

    def __init__(self, runtime: Runtime, writer: FrameOutput) -> None:
        self.runtime = runtime
        self.writer = writer
        self.sink = PipeSink(writer)

    def run(self, commands: IO[bytes]) -> None:
        reader = FrameReader(commands)
        while (frame := reader.read()) is not None:
            if not self.step(decode_command(*frame)):
                return
        self.runtime.shutdown()  # the front went away: end the turns it can no longer see

    def step(self, command: Command) -> bool:
        """Carry out one command; False after the last one (shutdown)."""
        runtime = self.runtime
        match command:
            case Shutdown(timeout):
                runtime.shutdown(timeout=timeout)
                return False
            case Open(call_id, sid, cwd, editor, how, servers):
                self._answer(call_id, lambda: self._open(sid, cwd, editor, how, servers))
            case Prompt(call_id, sid, parts, user_message):
                self._prompt(call_id, sid, parts, user_message)
            case Cancel(sid, reason):
                with contextlib.suppress(UnknownSession):
                    runtime.cancel(sid, reason)
            case Close(sid):
                with contextlib.suppress(UnknownSession):
                    runtime.close_session(sid)
            case AnswerPermission(call_id, sid, rid, outcome):
                self._answer(call_id, lambda: runtime.answer_permission(sid, rid, outcome))
            case AnswerEditor(call_id, sid, rid, answer):
                self._answer(call_id, lambda: runtime.answer_editor(sid, rid, answer))
            case ShowConfig(call_id, sid):
                self._answer(call_id, lambda: runtime.session_config(sid))
            case FlushJournal(call_id, _sid):
                self._answer(call_id, runtime.flush_journal)
            case SetModel(call_id, sid, model):
                self._answer(call_id, lambda: runtime.set_model(sid, model))
            case SetMode(call_id, sid, mode):
                self._answer(call_id, lambda: runtime.set_mode(sid, mode))
            case ReadMetrics(call_id):
                self._answer(call_id, process_metrics_text)
            case _:
                assert_never(command)
        return True

    def _open(
        self,
        session_id: str,
        cwd: str,
        editor: EditorCapabilities,
        how: OpenHow,
        servers: tuple[McpServerSpec, ...],
    ) -> str:
        """Open the session here; its MCP servers start in this process, beside it."""
        runtime, sink = self.runtime, self.sink
        if how == "new" or (how == "restore_or_new" and runtime.store is None):
            return runtime.open_session(
                Path(cwd), sink, session_id, editor=editor, mcp_servers=servers
            )
        try:
            runtime.restore_session(
                session_id, sink, editor=editor, mcp_servers=servers, with_frames=False
            )
        except UnknownSession:
            if how == "restore":
                raise
            return runtime.open_session(
                Path(cwd), sink, session_id, editor=editor, mcp_servers=servers
            )
        return session_id

    def _prompt(
        self,
        call_id: int,
        session_id: str,
        parts: tuple[Part, ...],
        user_message: UserMessage | None,
    ) -> None:
        try:
            reply = self.runtime.prompt(session_id, parts, user_message)
        except Exception as exc:
            self._raise(call_id, exc)
            return

        def returned(done: Future[TurnResult]) -> None:
            try:
                result = done.result()
            except Exception as exc:
                result = TurnResult(None, error=f"the turn failed: {exc!r}")
            self.writer.write(TurnEnded(call_id, result))

        reply.add_done_callback(returned)

    def _answer(self, call_id: int, call: Callable[[], str | bool | SessionConfig | None]) -> None:
        try:
            value = call()
        except Exception as exc:
            self._raise(call_id, exc)
            return
        if isinstance(value, SessionConfig):
            self.writer.write(ConfigReturned(call_id, value))
        else:
            self.writer.write(Returned(call_id, value))

    def _raise(self, call_id: int, exc: Exception) -> None:
        kind: ErrorKind
        match exc:
            case UnknownModel():  # the front raises it again, naming the choices
                self.writer.write(UnknownModelRaised(call_id, exc.model, tuple(exc.models)))
                return
            case SessionServedElsewhere():  # raised again too, naming the process
                self.writer.write(ServedElsewhereRaised(call_id, exc.session_id, exc.holder))
                return
            case StoreReadOnly():  # the front raises it again, so the agent names the cause
                self.writer.write(Raised(call_id, "store_read_only", exc.cause))
                return
            case UnknownSession():
                kind = "unknown_session"
            case HostClosed():
                kind = "host_closed"
            case McpRefused():  # the agent answers it as invalid params, naming the flag
                kind = "mcp_refused"
            case ValueError():
                kind = "invalid"
            case _:
                kind = "failed"
        self.writer.write(Raised(call_id, kind, str(exc) or repr(exc)))


def report_tool_groups(runtime: Runtime, writer: FrameOutput) -> None:
    """Tell the front of every tool and MCP server process group, so it can kill them
    should this process die."""

    def changed(pgid: int, live: bool) -> None:
        writer.write(ToolGroupChanged(pgid, live))

    for groups in runtime.watched_process_groups():
        groups.on_change = changed


def _stop_tools_and_exit(runtime: Runtime) -> Callable[[int, FrameType | None], None]:
    def handle(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(Exception):
            runtime.kill_tool_processes_now()
        os._exit(128 + signum)

    return handle


def _front_stops_this_worker(signum: int, frame: FrameType | None) -> None:
    """SIGHUP: nothing to do here, the front ends this worker through the pipe."""


def read_start(commands: IO[bytes]) -> Any:
    """The config of the front's first frame; its secrets go into ``os.environ`` (held:
    not in the environment a child inherits). Raises ``WireError`` for anything else."""
    frame = FrameReader(commands).read()
    match frame:
        case ({"type": "start", "config": config, "environment": dict(environment)}, b""):
            for name, value in environment.items():
                if not isinstance(name, str) or not isinstance(value, str):
                    raise WireError(f"a start frame with an environment entry {name!r}")
                hold_secret(name, value)
            return config
        case _:
            raise WireError(f"expected the start frame first, not {frame!r:.200}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m toolprep.runtime.workers.worker FACTORY "
            "(the config comes in the first frame on stdin)",
            file=sys.stderr,
        )
        return 2
    protect_process()
    # The front stops workers through the pipe; an interrupt or a hangup aimed at the
    # whole process group (Ctrl-C, a closed terminal) must not kill them under it.
    # SIGHUP gets a handler rather than SIG_IGN, which tool processes would inherit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, _front_stops_this_worker)
    front = FrontWatch.from_env()
    front.start()  # a front killed outright takes this worker with it
    dump_stacks_on_signal()  # Ctrl-\ dumps the workers' stacks along with the front's
    frames_out = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints go to stderr
    sys.stdout = sys.stderr
    commands = open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115
    try:
        config = read_start(commands)
    except WireError as exc:
        print(f"toolprep worker: {exc}", file=sys.stderr)
        return 2
    try:
        runtime = load_factory(argv[0])(config)
    except Exception as exc:
        print(f"toolprep worker: cannot build the runtime: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop_tools_and_exit(runtime))
    front.stop_tools = runtime.kill_tool_processes_now
    front.check()  # it may have died while the runtime was being built
    tune_process_for_daemon()
    writer = EventWriter(FrameWriter(frames_out))
    report_tool_groups(runtime, writer)
    writer.write(Ready(os.getpid()))
    try:
        WorkerLoop(runtime, writer).run(commands)
    except (WireError, ProtocolError) as exc:
        logger.error("the front sent something that is no command (%s); stopping", exc)
        runtime.shutdown()
        return 1
    finally:
        if runtime.store is not None:  # the factory's store: closing it checkpoints the WAL
            runtime.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
