"""A replay to one client waits for it to read, without holding up the session's live frames
for anyone else, and what came live meanwhile follows the replay: nothing lost or doubled.

The shared session is the real one; the connection is a small recording stand-in whose
``wait_for_room`` blocks until the test lets it go, which is what a client that is slow to
read looks like from the session's side.
"""

from __future__ import annotations

import threading
from typing import cast

import orjson

from toolprep.runtime.daemon.shared_session import SharedSession
from toolprep.runtime.kernel.session_host import ClientRequest, SessionHost

WAIT_S = 30.0


class SlowClient:
    """Records the frames it is sent; ``wait_for_room`` waits for ``room`` while ``slow``."""

    def __init__(self, *, slow: bool) -> None:
        self.frames: list[bytes] = []
        self.room = threading.Event()
        self.waiting = threading.Event()
        if not slow:
            self.room.set()

    def wait_for_room(self, nbytes: int, timeout: float) -> bool:
        self.waiting.set()
        return self.room.wait(timeout)

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        self.frames.append(update_json)

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        raise AssertionError("no request is expected")

    def withdraw_request(self, session_id: str, request_id: str, reason: str) -> None:
        raise AssertionError("no request is expected")


def _frame(seq: int) -> bytes:
    return orjson.dumps(
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": f"frame {seq}"},
            "_meta": {"toolprep": {"seq": seq}},
        }
    )


def _session_with(frames: int) -> SharedSession:
    # The host is not called on these paths (no permission or editor request).
    shared = SharedSession("sess_replay", cast(SessionHost, object()), "/")
    for seq in range(1, frames + 1):
        shared.send_encoded_update("sess_replay", _frame(seq))
    return shared


def test_live_frames_during_a_replay_reach_others_at_once_and_this_client_after_it() -> None:
    shared = _session_with(5)
    watching = SlowClient(slow=False)
    shared.attach(watching, replay=False)
    loading = SlowClient(slow=True)
    attach = threading.Thread(target=shared.attach, args=(loading,), kwargs={"replay": True})
    attach.start()
    assert loading.waiting.wait(WAIT_S)  # the replay is waiting for the client to read

    shared.send_encoded_update("sess_replay", _frame(6))  # live, while the replay waits
    assert watching.frames == [_frame(6)]  # the other client did not wait
    assert loading.frames == []

    loading.room.set()
    attach.join(WAIT_S)
    assert not attach.is_alive()
    assert loading.frames == [_frame(seq) for seq in range(1, 7)]  # in order, once each

    shared.send_encoded_update("sess_replay", _frame(7))  # attached: live from here on
    assert loading.frames[-1] == _frame(7)
    assert shared.attached == 2


def test_a_client_that_leaves_during_its_replay_is_not_attached_after_it() -> None:
    shared = _session_with(3)
    loading = SlowClient(slow=True)
    attach = threading.Thread(target=shared.attach, args=(loading,), kwargs={"replay": True})
    attach.start()
    assert loading.waiting.wait(WAIT_S)
    assert shared.detach(loading)  # its connection ended mid-replay
    loading.room.set()
    attach.join(WAIT_S)
    assert not attach.is_alive()
    assert shared.attached == 0
    shared.send_encoded_update("sess_replay", _frame(4))
    assert _frame(4) not in loading.frames
