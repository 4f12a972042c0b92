"""The private parts of pykka the role directory uses, and only here.

A restart moves a crashed actor's unread mail to its successor but must not forward
pykka's own stop request, nor a question whose asker waits on the dead actor. The inbox
holds pykka's internal ``Envelope`` objects (``message``, ``reply_to``), and a stop
request is the private ``pykka.messages._ActorStop``: neither is public API, so they are
read here only, resolved once at import. ``tests/actors/test_pykka_contract.py`` checks
them against the installed pykka and fails, naming it and its version, on an upgrade
that changes them.
"""

from __future__ import annotations

from typing import Any

import pykka.messages

__all__ = ["told_messages"]

_STOP_REQUEST: type = pykka.messages._ActorStop


def told_messages(inbox: Any) -> list[Any]:
    """Empty a dead actor's ``actor_inbox`` and return the messages it was told, in order:
    not questions (someone waits for their answer) nor pykka's stop request."""
    told: list[Any] = []
    while not inbox.empty():
        envelope = inbox.get()
        if envelope.reply_to is None and not isinstance(envelope.message, _STOP_REQUEST):
            told.append(envelope.message)
    return told
