"""A front whose workers keep dying, driven into its restart back-off by a client.

The front (``toolprep acp --workers 2`` or ``toolprep serve --workers 2``) restarts a
killed worker at once the first time and after a growing wait when it keeps dying
(1 s, doubling to 30 s). No option shortens that wait, so a test kills the front's
workers again and again until the request it checks is refused for want of a worker,
which the docs promise is error -32005 with an integer ``data.retryAfter``, and never
an internal error (-32603). A prompt that reached a worker the moment it was killed is
the one exception: its turn was lost, and it is answered so.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

import pytest

from tests.support.agent_process import AgentProcess
from tests.support.eventually import eventually
from tests.support.processes import worker_pids_of

__all__ = ["DEADLINE_S", "INTERNAL_ERROR", "NO_WORKER", "refused_for_want_of_a_worker"]

NO_WORKER = -32005
INTERNAL_ERROR = -32603
LOST = "the turn was lost"
"""What a prompt that reached a worker as it died is told (the documented crash path)."""
DEADLINE_S = 240.0
"""Generous: the waits grow to the 30 s cap while the test keeps killing."""
REPLY_S = 60.0


def refused_for_want_of_a_worker(
    editor: AgentProcess, front_pid: int, method: str, params: dict[str, Any]
) -> dict[str, Any]:
    """Kill ``front_pid``'s workers until ``method`` is answered -32005; that error.

    Fails at once when the request is answered with an internal error instead, so the
    old behaviour fails the test without waiting for the deadline.
    """

    def refused() -> dict[str, Any]:
        for pid in worker_pids_of(front_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reply = editor.reply(editor.request(method, params), timeout=REPLY_S)
        error: dict[str, Any] = reply.get("error", {})
        lost = method == "session/prompt" and LOST in error.get("message", "")
        if error.get("code") == INTERNAL_ERROR and not lost:
            pytest.fail(f"{method} was answered with an internal error: {error}")
        return error if error.get("code") == NO_WORKER else {}

    error = eventually(
        refused,
        timeout=DEADLINE_S,
        interval=0.1,
        what=f"{method} was never refused for want of a worker",
    )
    assert error["message"].startswith("no worker available: "), error
    retry_after = error["data"]["retryAfter"]
    assert isinstance(retry_after, int) and 1 <= retry_after <= 30, error
    return error
