"""run_shell_command: run a command through ``sh -c`` in the session cwd.

The command runs in its own process group so a timeout or a cancelled turn
can stop it together with everything it spawned; a group that outlives its
command (background children) stays in ``processes`` for the host to stop
when the turn ends. The command gets the agent's environment without its
secrets (``EnvironmentPolicy``), and those are masked in its output too.
Output (stdout and stderr interleaved, as a terminal would show them) is
read incrementally into a head+tail buffer, so a command printing gigabytes
costs a fixed amount of memory. Unless the config pre-approves it,
the command needs the client's permission first (asked by ``BuiltinTool.run``).
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import shlex
import signal
import subprocess
import threading
import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from toolprep.runtime.tools.acp_shapes import code_block, text_content
from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.builtin import BuiltinTool, shorten, str_arg
from toolprep.runtime.tools.capture import HeadTailBuffer
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.environment import EnvironmentPolicy
from toolprep.runtime.tools.process_groups import ProcessGroups, group_exists
from toolprep.runtime.tools.sandbox import Sandbox

_POLL_S = 0.05
_DRAIN_S = 0.25
_READ_SIZE = 64 * 1024
# Control and format characters (escape sequences, carriage returns, bidi overrides,
# zero-width characters) change what a title shows without being seen themselves.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Characters that can chain, redirect or substitute commands: a command using
# any of them is never pre-approved by prefix, since "ls; rm -rf ~" starts with "ls".
_SHELL_OPERATORS = frozenset(";&|<>`$()\n\r")

Ending = Literal["exited", "detached", "timeout", "cancelled"]


def is_preapproved(command: str, allowed: Sequence[str]) -> bool:
    """True if ``command`` is one simple command whose leading words match an allowed entry."""
    if not allowed or any(char in _SHELL_OPERATORS for char in command):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for entry in allowed:
        try:
            prefix = shlex.split(entry)
        except ValueError:
            continue
        if prefix and words[: len(prefix)] == prefix:
            return True
    return False


@dataclass(frozen=True, slots=True)
class _Finished:
    ending: Ending
    returncode: int | None


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the whole group, give it ``grace_s`` to exit, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        if sig == signal.SIGTERM:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
    proc.wait()


def _pump(
    proc: subprocess.Popen[bytes],
    buffer: HeadTailBuffer,
    timeout_s: float,
    cancelled: threading.Event,
    grace_s: float,
) -> _Finished:
    """Copy output into ``buffer`` until the command ends, times out or is cancelled.

    If the shell exits while a background child still holds the pipe open,
    reading stops shortly after instead of waiting for that child forever.
    """
    if proc.stdout is None:
        raise RuntimeError("the command was started without an output pipe")
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    ending: Ending = "exited"
    eof = False
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if cancelled.is_set():
                ending = "cancelled"
                break
            now = time.monotonic()
            if now >= deadline:
                ending = "timeout"
                break
            wait = min(_POLL_S, deadline - now)
            if eof:
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            if proc.poll() is not None:
                exited_at = now if exited_at is None else exited_at
                if now - exited_at > _DRAIN_S:
                    ending = "detached"
                    break
            for _key, _events in selector.select(timeout=wait):
                chunk = os.read(fd, _READ_SIZE)
                if chunk:
                    buffer.write(chunk)
                else:
                    eof = True
                    selector.unregister(fd)
        if ending in ("timeout", "cancelled"):
            _kill_group(proc, grace_s)
            if not eof:
                _drain(selector, fd, buffer)
    proc.stdout.close()
    return _Finished(ending, proc.wait())


def _drain(selector: selectors.BaseSelector, fd: int, buffer: HeadTailBuffer) -> None:
    """Collect what a just-killed group left in the pipe, without waiting on stragglers."""
    end = time.monotonic() + _DRAIN_S
    while time.monotonic() < end:
        ready = selector.select(timeout=max(0.0, end - time.monotonic()))
        if not ready:
            return
        chunk = os.read(fd, _READ_SIZE)
        if not chunk:
            return
        buffer.write(chunk)


def command_title(command: str) -> str:
    """The card and permission title: the whole command, exactly what will run.

    A title cut after its first line or 80 characters lets a command hide
    what it does (``ls`` followed by 200 spaces and ``; rm -rf ~``, or a
    second line), so the user would approve something they were not shown.
    A command of several lines says so up front and keeps one line per
    line; invisible and control characters (a carriage return that makes a
    terminal overwrite the line, a bidi override, an escape sequence) are
    spelled out as escapes instead of taking effect.
    """
    lines = [_visible(line) for line in command.splitlines()] or [""]
    if len(lines) == 1:
        return f"Run {lines[0]}"
    return f"Run (multi-line, {len(lines)} lines):\n" + "\n".join(lines)


def _visible(line: str) -> str:
    return "".join(
        char
        if char == "\t" or unicodedata.category(char) not in _HIDDEN_CATEGORIES
        else _escape(char)
        for char in line
    )


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _exit_note(returncode: int | None) -> str:
    if returncode is None:
        return "exit code unknown"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class RunShellCommandTool(BuiltinTool):
    """Run a shell command in the session directory."""

    name = "run_shell_command"
    description = (
        "Run a shell command (sh -c) in the working directory and return its combined "
        "stdout and stderr with the exit code. Stdin is empty, so interactive commands will "
        "not get input. Long output keeps its beginning and end. timeout_s bounds the run."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "minLength": 1,
                "description": "The command line to run.",
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Seconds before the command is killed.",
            },
        },
        "required": ["command"],
    }
    kind: ToolKind = "execute"

    def __init__(
        self,
        config: ToolConfig | None = None,
        *,
        environment: EnvironmentPolicy | None = None,
        processes: ProcessGroups | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        super().__init__(config)
        self.sandbox = sandbox
        self.environment = environment if environment is not None else EnvironmentPolicy()
        self.processes = (
            processes if processes is not None else ProcessGroups(self.config.kill_grace_s)
        )

    def title(self, args: Mapping[str, Any]) -> str:
        command = str_arg(args, "command")
        return command_title(command) if command else "Run command"

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        if self.config.allow_shell:
            return False
        command = str_arg(args, "command")
        return command is None or not is_preapproved(command, self.config.allowed_commands)

    def permission_scope(self, args: Mapping[str, Any]) -> str:
        """What "Always allow" covers: later runs of the same program when this is one simple
        command (``git status`` lets ``git diff`` run), else this exact command line."""
        command = str_arg(args, "command") or ""
        if not any(char in _SHELL_OPERATORS for char in command):
            try:
                words = shlex.split(command)
            except ValueError:
                words = []
            if words:
                return f"{self.name}: program {words[0]}"
        return f"{self.name}: command {command}"

    def timeout_for(self, args: Mapping[str, Any], ctx: ToolContext) -> float:
        """The requested timeout (or the default), never above the config or context bound."""
        requested = args.get("timeout_s") or self.config.default_timeout_s
        bound = self.config.max_timeout_s
        if ctx.timeout is not None:
            bound = min(bound, ctx.timeout)
        if not math.isfinite(requested):  # NaN would never compare as expired
            return float(bound)
        return float(min(requested, bound))

    def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        command: str = args["command"]
        timeout_s = self.timeout_for(args, ctx)
        buffer = HeadTailBuffer(self.config.max_shell_output_bytes)
        if not os.path.isdir(ctx.cwd):
            raise ToolError(f"{self.name}: the session directory {ctx.cwd} does not exist")
        try:
            argv = ["/bin/sh", "-c", command]
            if self.sandbox is not None:
                argv = self.sandbox.wrap(argv, cwd=str(ctx.cwd))
            proc = subprocess.Popen(
                argv,
                cwd=ctx.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.environment.environment(),
            )
        except OSError as exc:
            raise ToolError(
                f"{self.name}: cannot start {shorten(command)!r}: {exc.strerror}"
            ) from None
        # With start_new_session the shell leads a new group whose id is its pid.
        self.processes.add(ctx.session_id, proc.pid)
        try:
            finished = _pump(proc, buffer, timeout_s, ctx.cancelled, self.config.kill_grace_s)
        except BaseException:
            _kill_group(proc, 0)
            raise
        finally:
            if not group_exists(proc.pid):
                self.processes.discard(ctx.session_id, proc.pid)
        output = self.environment.mask(buffer.text())
        if finished.ending == "cancelled":
            raise ToolError(f"{self.name}: cancelled; {shorten(command)!r} was stopped")
        if finished.ending == "timeout":
            raise ToolError(
                f"{self.name}: {shorten(command)!r} timed out after {timeout_s:g} s and was "
                f"stopped. Output so far:\n{output or '(no output)'}"
            )
        return self._result(output, finished, buffer)

    def _result(self, output: str, finished: _Finished, buffer: HeadTailBuffer) -> ToolOutput:
        note = _exit_note(finished.returncode)
        if finished.ending == "detached":
            note += "; background processes still hold the output, later output is not captured"
        shown = output if output else "(no output)"
        content = [text_content(code_block(shown))]
        if finished.returncode != 0 or finished.ending == "detached":
            content.append(text_content(note[0].upper() + note[1:]))
        return ToolOutput(
            llm_output=f"{shown.rstrip()}\n[{note}]",
            content=tuple(content),
            raw_output={
                "exit_code": finished.returncode,
                "output_bytes": buffer.total,
                "truncated": buffer.truncated,
            },
        )
