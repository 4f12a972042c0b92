"""The supervisor's answers to a history that outgrew the model's context window.

Before a request, a history whose last request filled the window past
``CompactionPolicy.at`` is compacted: the reader asks the same model for a summary of the
older messages (``SummariseHistory``), which then stand in for them. A turn refused as too
large, compacted or not, drops its prompt so the session goes on as before it. Kept apart
from the turn loop because none of it concerns cards or tools: it edits the history and
tells the editor why.
"""

from __future__ import annotations

import logging

from toolprep.actors.base import EMITTER, READER
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.supervisor_state import SessionState, SupervisorState
from toolprep.messages.turns import SummariseHistory, WriteFrames
from toolprep.runtime.kernel.compaction import (
    SUMMARY_INSTRUCTION,
    CompactionPolicy,
    compaction_failed_note,
    compaction_note,
    prompt_refused_note,
    prompt_too_large_message,
    split_history,
    summary_message,
    summary_prompt,
)
from toolprep.runtime.providers.base import ModelRequest
from toolprep.runtime.providers.routes import ModelRoute

__all__ = ["HistoryCompaction"]

logger = logging.getLogger(__name__)


class HistoryCompaction:
    """Asks for a summary when the window is full, puts it in place, or says why not."""

    def __init__(
        self,
        directory: RoleDirectory,
        state: SupervisorState,
        policy: CompactionPolicy,
        max_tokens: int,
    ) -> None:
        self.directory = directory
        self.state = state
        self.policy = policy
        self.max_tokens = max_tokens

    def begin(self, session: SessionState, route: ModelRoute) -> bool:
        """Ask for a summary of the older history if the last request filled the window.

        True if the summary was asked for (phase ``compacting``, under a new attempt
        number): the request then waits for its answer.
        """
        used, session.used = session.used, 0  # one try per usage report
        if not self.policy.due(used, route.window):
            return False
        split = split_history(session.history, used, self.policy.keep_tokens(route.window))
        if split is None:
            return False
        self.state.attempts_started += 1
        session.attempt = self.state.attempts_started
        session.phase = "compacting"
        session.summarised = split.at
        request = ModelRequest(
            model=route.model,
            history=summary_prompt(session.history[: split.at]),
            system=SUMMARY_INSTRUCTION,
            max_tokens=self.max_tokens,
        )
        logger.info(
            "compacting %s: %d of %d tokens used, summarising %d of %d messages",
            session.session_id,
            used,
            route.window,
            split.at,
            len(session.history),
        )
        order = session.order[session.route]
        self.directory.observer.compaction_started(session.session_id)
        self.directory.tell(
            READER, SummariseHistory(session.session_id, session.attempt, order, request)
        )
        return True

    def apply(self, session: SessionState, summary: str) -> None:
        """Put ``summary`` in place of the messages it summarises; the editor hears so."""
        assert session.turn is not None
        count = session.summarised
        session.history[:count] = [summary_message(summary)]
        session.turn.compacted = True
        # The turn's prompt moved with the cut (or, in a long turn, went into the summary).
        session.turn.history_mark = max(1, session.turn.history_mark - count + 1)
        notes = (compaction_note(count),)
        self.directory.observer.compaction_ended(session.session_id, "completed")
        self.directory.tell(EMITTER, WriteFrames.of(session.session_id, notes))

    def failed(self, session: SessionState, error: str) -> None:
        """The request goes on with the whole history; the editor hears why it was not
        compacted."""
        logger.warning("compacting %s failed: %s", session.session_id, error)
        self.directory.observer.compaction_ended(session.session_id, "failed")
        notes = (compaction_failed_note(error),)
        self.directory.tell(EMITTER, WriteFrames.of(session.session_id, notes))

    def drop_prompt(self, session: SessionState, route: ModelRoute) -> str:
        """Take a turn refused as too large out of the history; returns the turn's error.

        Kept, the prompt would be sent with every later request of the session and
        refused each time. The note follows the prompt's record, so a replay shows
        it was not answered; the stored history is cut back with the turn's end.
        """
        turn = session.turn
        assert turn is not None
        del session.history[turn.history_mark :]
        error = prompt_too_large_message(turn.prompt, route.window, turn.last_error)
        note = WriteFrames.of(session.session_id, (prompt_refused_note(error),))
        self.directory.tell(EMITTER, note)
        return error
