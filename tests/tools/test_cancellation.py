"""``CancelEvent.cancel_with``: whatever state the future is in when it is registered."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from toolprep.runtime.tools.cancellation import CancelEvent


def test_a_future_already_done_is_registered_without_deadlock() -> None:
    """A call that fails at once (an MCP server known to be gone) is done before it is
    registered; its done callback then runs on the registering thread."""
    event = CancelEvent()
    done: Future[int] = Future()
    done.set_result(1)
    worker = threading.Thread(target=event.cancel_with, args=(done,), daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive()
    event.set()  # nothing left waiting: nothing to cancel
    assert done.result() == 1


def test_setting_cancels_a_waiting_future_and_a_late_one_at_once() -> None:
    event = CancelEvent()
    waiting: Future[int] = Future()
    event.cancel_with(waiting)
    event.set()
    assert waiting.cancelled()
    late: Future[int] = Future()
    event.cancel_with(late)
    assert late.cancelled()
