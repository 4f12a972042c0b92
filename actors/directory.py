"""Where role actors find each other, and how a crashed role comes back.

Roles address each other by name through the directory rather than holding
``ActorRef``s, so a restarted actor is picked up by every sender at once. The
state a role owns lives in a separate object handed to its successor, which
is what lets a restarted tracker still discard the cards its predecessor
showed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import pykka

from toolprep.actors.pykka_compat import told_messages
from toolprep.actors.read_credit import ReadCredit
from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver

logger = logging.getLogger(__name__)

RoleFactory = Callable[[], "pykka.ActorRef[Any]"]


class Inbox(Protocol):
    def get(self) -> Any: ...

    def empty(self) -> bool: ...


class CrashedActor(Protocol):
    """What the directory needs of a crashed actor: its role and its unread mail."""

    @property
    def role(self) -> str: ...

    @property
    def actor_inbox(self) -> Inbox: ...


class RestartBudgetExceeded(RuntimeError):
    """A role crashed more often than its budget allows; the runtime is broken."""


class RoleDirectory:
    """Name -> live actor, with restart-on-crash inside a budget per role; the
    ``observer`` every role tells what it did (``runtime.kernel.observer``); and the
    ``read_credit`` that paces each session's stream to the roles (``actors.read_credit``)."""

    def __init__(
        self,
        *,
        max_restarts: int = 5,
        within_seconds: float = 60.0,
        observer: TurnObserver = NO_OBSERVER,
    ) -> None:
        self.observer = observer
        self.read_credit = ReadCredit()
        self._refs: dict[str, pykka.ActorRef[Any]] = {}
        self._factories: dict[str, RoleFactory] = {}
        self._crashes: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._max_restarts = max_restarts
        self._within = within_seconds
        self._broken: dict[str, str] = {}
        self._stopping = False
        self.restarts: dict[str, int] = {}

    def register(self, role: str, factory: RoleFactory) -> pykka.ActorRef[Any]:
        ref = factory()
        with self._lock:
            self._factories[role] = factory
            self._refs[role] = ref
            self._changed.notify_all()
        return ref

    def ref(self, role: str) -> pykka.ActorRef[Any]:
        with self._lock:
            return self._refs[role]

    @property
    def broken(self) -> dict[str, str]:
        with self._lock:
            return dict(self._broken)

    def tell(self, role: str, message: object) -> None:
        """Deliver to the role's current actor, following a restart in progress."""
        deadline = time.monotonic() + 5.0
        while True:
            # Put under the lock: a restart moves the dead actor's mail under it too, so a
            # message is either in that mail when it is moved or goes to the successor after
            # it, never overtaking it nor left behind in the dead mailbox.
            with self._lock:
                ref = self._refs.get(role)
                if role in self._broken or self._stopping:
                    logger.warning(
                        "dropping %s for %s: role unavailable", type(message).__name__, role
                    )
                    return
                if ref is None:
                    raise KeyError(role)
                try:
                    ref.tell(message)
                    return
                except pykka.ActorDeadError:  # crashed: wait for its successor
                    self._changed.wait(timeout=0.05)
                if time.monotonic() > deadline:
                    logger.error("role %s stayed dead; dropping %s", role, type(message).__name__)
                    return

    def restart_after_crash(
        self, actor: CrashedActor, error: BaseException
    ) -> pykka.ActorRef[Any] | None:
        """Start a successor for ``actor``'s role and move its unread mail over."""
        role = actor.role
        now = time.monotonic()
        with self._lock:
            if self._stopping:
                return None
            window = self._crashes.setdefault(role, deque())
            window.append(now)
            while window and now - window[0] > self._within:
                window.popleft()
            if len(window) > self._max_restarts:
                self._broken[role] = (
                    f"{role} crashed {len(window)} times in {self._within:.0f}s: {error!r}"
                )
                logger.critical("restart budget exceeded: %s", self._broken[role])
                self._changed.notify_all()
                return None
            factory = self._factories[role]
        successor = factory()
        moved = 0
        with self._lock:  # the queued mail first, then what ``tell`` held back meanwhile
            for message in told_messages(actor.actor_inbox):  # never pykka's own stop request
                successor.tell(message)
                moved += 1
            self._refs[role] = successor
            self.restarts[role] = self.restarts.get(role, 0) + 1
            self._changed.notify_all()
        logger.error("%s crashed (%r); restarted, %d queued messages moved", role, error, moved)
        return successor

    def stop_all(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stopping = True
            refs = list(self._refs.values())
            self._changed.notify_all()
        for ref in refs:
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                ref.stop(block=True, timeout=timeout)
