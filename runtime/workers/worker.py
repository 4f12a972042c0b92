"""A worker process: one whole ``Runtime`` serving the sessions its front routes to it.

Run as ``python -m toolprep.runtime.workers.worker FACTORY CONFIG``: FACTORY
names a function (``package.module:function``) that builds the runtime from
CONFIG (JSON), so a worker runs exactly the tools and providers its front's
owner configured. Commands arrive on stdin and frames leave on stdout
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
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import IO, Any

import orjson

from toolprep.messages.frames import card_change
from toolprep.messages.modes import check_mode
from toolprep.messages.permissions import check_outcome
from toolprep.messages.turns import TurnResult
from toolprep.runtime.host import Runtime
from toolprep.runtime.mcp.policy import McpRefused
from toolprep.runtime.mcp.specs import McpServerSpec
from toolprep.runtime.process_tuning import tune_process_for_daemon
from toolprep.runtime.session_host import (
    ClientRequest,
    EditorCapabilities,
    HostClosed,
    SessionServedElsewhere,
    StoreReadOnly,
    UnknownModel,
    UnknownSession,
)
from toolprep.runtime.stop_signals import dump_stacks_on_signal
from toolprep.runtime.workers.codec import (
    dump_config,
    dump_request,
    dump_result,
    load_answer,
    load_mcp_servers,
    load_prompt,
)
from toolprep.runtime.workers.front_death import FrontWatch
from toolprep.runtime.workers.transport import FrameOutput
from toolprep.runtime.workers.wire import FrameReader, FrameWriter, WireError

logger = logging.getLogger(__name__)

RuntimeFactory = Callable[[Any], Runtime]


class PipeSink:
    """The ``FrameSink`` of every session of this worker: frames on their way to the front."""

    def __init__(self, writer: FrameOutput) -> None:
        self._writer = writer

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        self._writer.write(["updated", session_id, card_change(update)], orjson.dumps(update))

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        card = card_change(orjson.loads(update_json))
        self._writer.write(["updated", session_id, card], update_json)

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        self._writer.write(["requested", session_id, dump_request(request)])


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
    from a pipe (``run``), or handed over one call each (``step``, as a Ray shard does)."""

    def __init__(self, runtime: Runtime, writer: FrameOutput) -> None:
        self.runtime = runtime
        self.writer = writer
        self.sink = PipeSink(writer)

    def run(self, commands: IO[bytes]) -> None:
        reader = FrameReader(commands)
        while (frame := reader.read()) is not None:
            if not self.step(*frame):
                return
        self.runtime.shutdown()  # the front went away: end the turns it can no longer see

    def step(self, header: list[Any], payload: bytes) -> bool:
        """Carry out one command; False after the last one (shutdown)."""
        if header[0] == "shutdown":
            self.runtime.shutdown(timeout=float(header[1]))
            return False
        self.handle(header, payload)
        return True

    def handle(self, header: list[Any], payload: bytes) -> None:
        match header:
            case [
                "open",
                int(call_id),
                str(sid),
                str(cwd),
                bool(can_read),
                bool(can_write),
                "new" | "restore" | "restore_or_new" as how,
                list(servers),
            ]:
                editor = EditorCapabilities(read_text_file=can_read, write_text_file=can_write)
                specs = load_mcp_servers(servers)
                self._answer(call_id, lambda: self._open(sid, cwd, editor, how, specs))
            case ["prompt", int(call_id), str(sid)]:
                self._prompt(call_id, sid, payload)
            case ["cancel", str(sid)]:
                with contextlib.suppress(UnknownSession):
                    self.runtime.cancel(sid)
            case ["close", str(sid)]:
                with contextlib.suppress(UnknownSession):
                    self.runtime.close_session(sid)
            case ["answer_permission", int(call_id), str(sid), str(rid), str(outcome)]:
                self._answer(
                    call_id,
                    lambda: self.runtime.answer_permission(sid, rid, check_outcome(outcome)),
                )
            case ["answer_editor", int(call_id), str(sid), str(rid), answer]:
                self._answer(
                    call_id,
                    lambda: self.runtime.answer_editor(sid, rid, load_answer(answer)),
                )
            case ["session_config", int(call_id), str(sid)]:
                self._answer(call_id, lambda: dump_config(self.runtime.session_config(sid)))
            case ["flush_journal", int(call_id), str(_sid)]:
                self._answer(call_id, self.runtime.flush_journal)
            case ["set_model", int(call_id), str(sid), str(model)]:
                self._answer(call_id, lambda: dump_config(self.runtime.set_model(sid, model)))
            case ["set_mode", int(call_id), str(sid), str(mode)]:
                self._answer(
                    call_id, lambda: dump_config(self.runtime.set_mode(sid, check_mode(mode)))
                )
            case _:
                raise WireError(f"not a worker command: {header!r}")

    def _open(
        self,
        session_id: str,
        cwd: str,
        editor: EditorCapabilities,
        how: str,
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

    def _prompt(self, call_id: int, session_id: str, payload: bytes) -> None:
        try:
            parts, user_message = load_prompt(orjson.loads(payload))
            reply = self.runtime.prompt(session_id, parts, user_message)
        except Exception as exc:
            self._raise(call_id, exc)
            return

        def returned(done: Future[TurnResult]) -> None:
            try:
                result = done.result()
            except Exception as exc:
                result = TurnResult(None, error=f"the turn failed: {exc!r}")
            self.writer.write(["returned", call_id, dump_result(result)])

        reply.add_done_callback(returned)

    def _answer(self, call_id: int, call: Callable[[], Any]) -> None:
        try:
            value = call()
        except Exception as exc:
            self._raise(call_id, exc)
            return
        self.writer.write(["returned", call_id, value])

    def _raise(self, call_id: int, exc: Exception) -> None:
        match exc:
            case UnknownModel():  # the front raises it again, naming the choices
                self.writer.write(["raised", call_id, "unknown_model", exc.model, exc.models])
                return
            case SessionServedElsewhere():  # raised again too, naming the process
                self.writer.write(
                    ["raised", call_id, "served_elsewhere", exc.session_id, exc.holder]
                )
                return
            case StoreReadOnly():  # the front raises it again, so the agent names the cause
                self.writer.write(["raised", call_id, "store_read_only", exc.cause])
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
        self.writer.write(["raised", call_id, kind, str(exc) or repr(exc)])


def report_tool_groups(runtime: Runtime, writer: FrameOutput) -> None:
    """Tell the front of every tool and MCP server process group, so it can kill them
    should this process die."""

    def changed(pgid: int, live: bool) -> None:
        writer.write(["tool_group", pgid, live])

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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m toolprep.runtime.workers.worker FACTORY CONFIG", file=sys.stderr)
        return 2
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
    try:
        runtime = load_factory(argv[0])(orjson.loads(argv[1]))
    except Exception as exc:
        print(f"toolprep worker: cannot build the runtime: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop_tools_and_exit(runtime))
    front.stop_tools = runtime.kill_tool_processes_now
    front.check()  # it may have died while the runtime was being built
    tune_process_for_daemon()
    writer = FrameWriter(frames_out)
    report_tool_groups(runtime, writer)
    writer.write(["ready", os.getpid()])
    commands = open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115
    try:
        WorkerLoop(runtime, writer).run(commands)
    except (WireError, orjson.JSONDecodeError) as exc:
        logger.error("the front sent something that is no command (%s); stopping", exc)
        runtime.shutdown()
        return 1
    finally:
        if runtime.store is not None:  # the factory's store: closing it checkpoints the WAL
            runtime.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
