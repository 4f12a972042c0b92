"""The contract of ``actors/pykka_compat.py`` with the installed pykka.

A restart moves a crashed actor's unread mail to its successor but must not forward pykka's
own stop request. That request is a private envelope type; if pykka renames or reshapes it,
these tests fail, naming pykka and its version, before a restart could silently stop the
successor.
"""

from __future__ import annotations

import threading
from typing import Any

import pykka

from tests.support.contract import broken
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.pykka_compat import told_messages

COMPAT = "actors/pykka_compat.py"


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
        assert envelopes[0].message == "mail", broken(
            "pykka", COMPAT, "an inbox envelope's message is not the message told"
        )
        assert all(hasattr(e, "reply_to") for e in envelopes), broken(
            "pykka", COMPAT, "inbox envelopes have no reply_to"
        )
        assert envelopes[0].reply_to is None, broken(
            "pykka", COMPAT, "a told message's envelope has a reply_to"
        )
        stop = envelopes[-1]
        assert isinstance(stop.message, pykka.messages._ActorStop), broken(
            "pykka", COMPAT, f"a stop request is a {type(stop.message)!r}, not _ActorStop"
        )
        # the stopper waits for an answer
        assert stop.reply_to is not None, broken("pykka", COMPAT, "a stop request has no reply_to")
        for envelope in envelopes:
            inbox.put(envelope)
    finally:
        release.set()
    stopped.get(timeout=10)


def test_told_messages_are_the_mail_told_not_questions_nor_the_stop_request() -> None:
    entered, release = threading.Event(), threading.Event()
    ref = _Blocked.start(entered, release)
    try:
        ref.tell("block")
        assert entered.wait(10)
        ref.tell("first")
        ref.ask("question", block=False)
        ref.tell("second")
        ref.stop(block=False)

        told = told_messages(ref.actor_inbox)

        assert told == ["first", "second"], broken(
            "pykka", COMPAT, f"a dead actor's inbox gave {told!r} as its told mail"
        )
    finally:
        release.set()
    # The inbox was emptied: the actor never sees that stop request; stop it again.
    ref.stop(block=True, timeout=10)


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
