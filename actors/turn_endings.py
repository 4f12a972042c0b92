"""How a turn ends, and then a closing session: the last things the supervisor sends.

Every way a turn ends (a stop reason, a failure, a cancel) goes through ``finish_turn``:
the result is delivered by the emitter behind every frame the turn sent, so every card is
terminal before the reply. A session being closed is forgotten only after its turn's
result, and its sink detached last, so the close counts as done once every role was told.
"""

from __future__ import annotations

from concurrent.futures import Future

from toolprep.actors.base import EMITTER, EXECUTOR, TRACKER
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.supervisor_state import SessionState, SupervisorState
from toolprep.messages.content import Content, FunctionCallPart
from toolprep.messages.turns import (
    DeliverTurnResult,
    DetachSink,
    SessionClosed,
    StopReason,
    TurnFailure,
    TurnResult,
)

__all__ = ["finish_turn", "forget_session"]


def finish_turn(
    directory: RoleDirectory,
    state: SupervisorState,
    session: SessionState,
    stop: StopReason | None,
    *,
    error: str | None = None,
    failure: TurnFailure | None = None,
) -> None:
    """End the session's turn with ``stop`` (or ``error``); a closing session then goes."""
    turn = session.turn
    assert turn is not None
    session.turn = None
    session.phase = "idle"
    if stop == "cancelled" and session.history and len(session.history) > turn.history_mark:
        _drop_dangling_calls(session.history)
    result = TurnResult(stop, error=error, usage=turn.usage, failure=failure)
    history = tuple(session.history)
    directory.tell(
        EMITTER,
        DeliverTurnResult(
            session.session_id, result, turn.reply, history, rewritten=turn.compacted
        ),
    )
    if session.closing:
        forget_session(directory, state, session)


def forget_session(directory: RoleDirectory, state: SupervisorState, session: SessionState) -> None:
    """Drop the session here and in every role that keeps anything of it."""
    state.sessions.pop(session.session_id, None)
    for role in (TRACKER, EXECUTOR):
        directory.tell(role, SessionClosed(session.session_id))
    # After any DeliverTurnResult already sent, so the closing turn's discards still go out;
    # last, so the close counts as done only once every role was told.
    closed: Future[None] = Future() if session.closed is None else session.closed
    directory.tell(EMITTER, DetachSink(session.session_id, closed))


def _drop_dangling_calls(history: list[Content]) -> None:
    """A model message whose calls got no responses would break the next request."""
    last = history[-1] if history else None
    if (
        last is not None
        and last.role == "model"
        and any(isinstance(p, FunctionCallPart) for p in last.parts)
    ):
        history.pop()
