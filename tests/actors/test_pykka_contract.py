"""The parts of pykka's internals the role directory relies on, checked against the real pykka.

A restart moves a crashed actor's unread mail to its successor but must not forward pykka's
own stop request. That request is a private envelope type; if pykka renames or reshapes it,
these tests fail before a restart could silently stop the successor.
"""

from __future__ import annotations

import threading
from typing import Any

import pykka

from toolprep.actors.directory import RoleDirectory


class _Blocked(pykka.ThreadingActor):
    """Holds its thread in the first message so later mail stays in the inbox."""

    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        super().__init__()
        self.entered = entered
        self.release = release
        self.received: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        self.received.append(message)
        if message == "block":
            self.entered.set()
            self.release.wait(10)
        return None


def test_a_stop_request_waits_in_the_inbox_as_the_private_stop_envelope() -> None:
    entered, release = threading.Event(), threading.Event()
    ref = _Blocked.start(entered, release)
    try:
        ref.tell("block")
        assert entered.wait(10)
        ref.tell("mail")
        stopped = ref.stop(block=False)
        inbox = ref.actor_inbox
        envelopes = []
        while not inbox.empty():
            envelopes.append(inbox.get())
        assert envelopes[0].message == "mail"
        assert all(hasattr(e, "reply_to") for e in envelopes)
        assert envelopes[0].reply_to is None
        stop = envelopes[-1]
        assert isinstance(stop.message, pykka.messages._ActorStop)
        assert stop.reply_to is not None  # the stopper waits for an answer
        for envelope in envelopes:
            inbox.put(envelope)
    finally:
        release.set()
    stopped.get(timeout=10)


class _Role(pykka.ThreadingActor):
    role = "probe"

    def __init__(self, received: list[Any]) -> None:
        super().__init__()
        self.received = received

    def on_receive(self, message: Any) -> Any:
        self.received.append(message)
        return None


def test_restart_forwards_mail_but_not_the_stop_request() -> None:
    entered, release = threading.Event(), threading.Event()
    crashed = _Blocked.start(entered, release)
    crashed.tell("block")
    assert entered.wait(10)
    crashed.tell("first")
    crashed.tell("second")
    crashed.stop(block=False)

    successor_mail: list[Any] = []
    directory = RoleDirectory()
    # register() starts an actor at once; the restart below replaces it in the
    # directory, so stop_all() no longer knows it and the test stops it itself.
    replaced = directory.register("probe", lambda: _Role.start(successor_mail))

    class _Crashed:
        role = "probe"
        actor_inbox = crashed.actor_inbox

    try:
        successor = directory.restart_after_crash(_Crashed(), RuntimeError("boom"))
        assert successor is not None
        successor.ask("last", timeout=10)
        assert successor_mail == ["first", "second", "last"]
        assert successor.is_alive(), "the forwarded mail must not include pykka's stop request"
    finally:
        release.set()
        directory.stop_all()
        replaced.stop(block=True, timeout=10)
        crashed.stop(block=True, timeout=10)
