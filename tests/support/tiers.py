"""The ``process`` tier: which tests start other processes, and a guard for the fast tier.

The rule: a test is marked ``process`` when running it (its set-up, its body or its
fixtures) starts any other process, be it an interpreter (the agent, the daemon, a
worker, a Ray cluster, a wheel build, an MCP server, a probe) or any other program
(a shell tool command, ``bash``, ``git``). Everything else runs in this process
only, and ``pytest -m "not process"`` runs just that: the fast local loop.

Nobody has to remember the marker:

- a test is marked when its code, the code of the fixtures it uses, or the
  test-suite functions and classes those reach (any code but ``toolprep``'s and
  installed libraries') refer to something that starts processes: the ``subprocess``,
  ``multiprocessing`` and ``pty`` modules, ``ray``, the ACP SDK's
  ``spawn_agent_process``, or one of the runtime modules that start them
  (``SPAWNING_MODULES``);
- a module or parameter that starts processes in a way no name shows (a host
  factory picked by parameter, a scenario that makes the agent run a shell
  command) says so itself with ``pytest.mark.process``;
- and when only the fast tier runs, an audit hook watches every process start
  (``subprocess.Popen``, ``os.fork``, ``os.forkpty``, ``os.posix_spawn``,
  ``os.exec``, ``os.spawn``, ``os.system``) and fails the test that made it, with
  the stack of the call, so a test the two rules above miss cannot hide in the
  fast tier. (``multiprocessing``'s spawn start method raises no audit event; the
  first rule covers a test that imports it.) Audit hooks cannot be removed, so the
  hook only records while a flag says a fast-tier test is running.
"""

from __future__ import annotations

import dis
import functools
import inspect
import os
import platform
import site
import sys
import threading
import traceback
import types
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["MARKER", "SPAWNING_MODULES", "starts_processes"]

MARKER = "process"  # registered, with its description, in pyproject.toml

# Anything defined in these modules, or the modules themselves, starts processes.
SPAWNING_MODULES = frozenset(
    {
        "subprocess",
        "multiprocessing",
        "pty",
        "asyncio.subprocess",
        "ray",
        "acp.stdio",
        "toolprep.runtime.cli.demo_session",
        "toolprep.runtime.mcp.stdio",
        "toolprep.runtime.ray_host",
        "toolprep.runtime.tools.group_reaper",
        "toolprep.runtime.tools.shell",
        "toolprep.runtime.workers.worker_host",
        "toolprep.runtime.workers.worker_restarts",
        "toolprep.runtime.workers.process",
        "toolprep.testing.ray_cluster",
    }
)
# The test suite's own functions and classes are followed, what they reach counts: code that
# is neither the package under test nor an installed library (standard or third-party).
PACKAGE = "toolprep"
LIBRARY_FOLDERS = tuple(
    {
        str(Path(folder).resolve()) + os.sep
        for folder in (
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            sys.base_exec_prefix,
            *site.getsitepackages(),
            site.getusersitepackages(),
        )
    }
)
PROCESS_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
        "os.spawn",
        "os.system",
    }
)


def _in(module: str, names: Iterable[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def _module_of(obj: object) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module = getattr(obj, "__module__", None)
    return module if isinstance(module, str) else ""


def _followed(obj: object) -> bool:
    """Part of the test suite (or the benchmarks): neither ``toolprep`` nor a library."""
    return _followed_module(_module_of(obj))


@functools.cache
def _followed_module(name: str) -> bool:
    if _in(name, (PACKAGE,)):
        return False
    path = getattr(sys.modules.get(name), "__file__", None)
    return isinstance(path, str) and not str(Path(path).resolve()).startswith(LIBRARY_FOLDERS)


def _codes_of(obj: object) -> list[tuple[types.CodeType, dict[str, Any]]]:
    """The code (and globals) a followed function or class runs."""
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        return [(obj.__code__, obj.__globals__)]
    if isinstance(obj, type):
        found: list[tuple[types.CodeType, dict[str, Any]]] = []
        for klass in obj.__mro__:
            if not _followed(klass):
                continue
            for member in vars(klass).values():
                for part in (
                    member,
                    getattr(member, "__func__", None),
                    getattr(member, "fget", None),
                ):
                    if isinstance(part, types.FunctionType):
                        found.append((part.__code__, part.__globals__))
        return found
    return []


class _Reach:
    """Whether code reaches a process-starting name; memoised per code object."""

    def __init__(self) -> None:
        self._done: dict[types.CodeType, bool] = {}

    def obj(self, obj: object, seen: set[types.CodeType]) -> bool:
        module = _module_of(obj)
        if _in(module, SPAWNING_MODULES):
            return True
        if not _followed(obj):
            return False
        return any(self.code(code, namespace, seen) for code, namespace in _codes_of(obj))

    def code(
        self, code: types.CodeType, namespace: dict[str, Any], seen: set[types.CodeType]
    ) -> bool:
        if code in self._done:
            return self._done[code]
        if code in seen:
            return False  # recursion: the first visit decides
        seen.add(code)
        result = any(self.obj(used, seen) for used in _globals_used(code, namespace)) or any(
            self.code(const, namespace, seen)
            for const in code.co_consts
            if isinstance(const, types.CodeType)
        )
        self._done[code] = result
        return result


def _globals_used(code: types.CodeType, namespace: dict[str, Any]) -> list[object]:
    """The globals the code loads, and the attributes it takes of global modules
    (``subprocess.run``, ``load.main``): not attributes of other objects, which a
    name alone cannot tell."""
    used: list[object] = []
    module: types.ModuleType | None = None
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_ATTR", "LOAD_METHOD") and module is not None:
            used.append(getattr(module, instruction.argval, None))
        module = None
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and instruction.argval in namespace:
            value = namespace[instruction.argval]
            used.append(value)
            if isinstance(value, types.ModuleType):
                module = value
    return used


_REACH = _Reach()


def starts_processes(item: pytest.Item) -> bool:
    """True if the test's code or a fixture it uses reaches a process-starting name."""
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    definitions: dict[str, Any] = getattr(info, "name2fixturedefs", {}) or {}
    for name in getattr(item, "fixturenames", ()):
        functions += [definition.func for definition in definitions.get(name, ())]
    return any(
        _REACH.code(code, namespace, set())
        for function in functions
        if function is not None
        for code, namespace in _codes_of(function)
    )


# --- the guard ---------------------------------------------------------------------------------


def _command(event: str, args: tuple[Any, ...]) -> str:
    """The program the event starts, as readable as the event tells it."""
    match event:
        case "subprocess.Popen" | "os.posix_spawn" | "os.exec":
            return repr(args[1])  # (executable or path, argv, ...)
        case "os.system":
            command = args[0]
            return repr(command.decode(errors="replace") if isinstance(command, bytes) else command)
        case "os.spawn":
            return repr(args[2])  # (mode, path, argv, env)
        case _:
            return "(a fork of this interpreter)"


_PLUMBING = (f"{os.sep}_pytest{os.sep}", f"{os.sep}pluggy{os.sep}", __file__)


class _Guard:
    """Records process starts while a fast-tier test runs (an audit hook cannot be removed)."""

    def __init__(self) -> None:
        self.watching = False
        self.started: list[str] = []
        self._lock = threading.Lock()
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.watching or event not in PROCESS_EVENTS:
            return
        what = f"{event}: {_command(event, args)}"
        frames = [
            frame
            for frame in traceback.extract_stack()[:-1]
            if not any(part in frame.filename for part in _PLUMBING)
        ]
        stack = "".join(traceback.format_list(frames[-8:]))
        with self._lock:
            self.started.append(f"{what}\n{stack}")

    def take(self) -> list[str]:
        with self._lock:
            started, self.started = self.started, []
        return started


_GUARD: _Guard | None = None


def _fast_tier_only(config: pytest.Config) -> bool:
    """True when the mark expression deselects the ``process`` tier."""
    expression = " ".join(str(config.getoption("markexpr", "") or "").split())
    return f"not {MARKER}" in expression


def pytest_configure(config: pytest.Config) -> None:
    global _GUARD
    if _fast_tier_only(config) and _GUARD is None:
        # The standard library's one probe of the machine (``uname -p``, which the provider
        # SDKs ask for once per process): made before the tests, not inside the first one.
        platform.processor()
        _GUARD = _Guard()


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker(MARKER) is None and starts_processes(item):
            item.add_marker(MARKER)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    guard = _GUARD
    if guard is None or item.get_closest_marker(MARKER) is not None:
        return (yield)
    guard.take()
    guard.watching = True
    try:
        return (yield)
    finally:
        guard.watching = False


def _check(item: pytest.Item) -> None:
    guard = _GUARD
    if guard is None or not guard.watching:
        return
    started = guard.take()
    if started:
        pytest.fail(
            f"{item.nodeid} started a process but is not marked {MARKER!r} "
            f"(add pytest.mark.{MARKER}; see CONTRIBUTING.md, Test tiers):\n\n"
            + "\n".join(started),
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield
    _check(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield
    _check(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    yield
    _check(item)
