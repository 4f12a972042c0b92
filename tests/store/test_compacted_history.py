"""A compacted history replaces the stored one whole, even when its first save was lost.

The store otherwise only appends what a turn added (or cuts back what a
refused turn took), so without the ``rewritten`` mark a compacted, shorter
history would leave the old entries in place and a loaded session would go
on from history the model was no longer sent.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.store.test_journal import LONG_BUSY_S, journal_on
from tests.support.sqlite_lock import write_locked
from toolprep.messages.content import Content, TextPart
from toolprep.runtime.kernel.compaction import summary_message
from toolprep.runtime.store import SessionStore


def _said(role: str, text: str) -> Content:
    return Content("user" if role == "user" else "model", (TextPart(text),))


LONG = tuple(_said(role, f"{role} {n}") for n in range(3) for role in ("user", "model"))
COMPACTED = (summary_message("what was said"), *LONG[-3:])
NEXT = (*COMPACTED, _said("user", "user 3"), _said("model", "model 3"))


def test_a_rewritten_history_replaces_the_stored_one_and_later_turns_append(
    tmp_path: Path,
) -> None:
    with SessionStore(tmp_path / "sessions.db") as store:
        store.sessions.create("sess_a", str(tmp_path))
        store.sessions.save_history("sess_a", LONG)
        store.sessions.save_history("sess_a", COMPACTED, rewritten=True)
        assert store.sessions.load("sess_a").history == COMPACTED
        store.sessions.save_history("sess_a", NEXT)
        assert store.sessions.load("sess_a").history == NEXT
        assert store.sessions.load("sess_a").info.title == "user 0"  # the session keeps its title


def test_a_lost_compacted_save_makes_the_next_save_rewrite_the_whole_history(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with journal_on(tmp_path, "sess_a", busy_timeout=0.05) as (journal, store, db):
        journal.turn_ended("sess_a", LONG)
        assert journal.flush(timeout=LONG_BUSY_S)
        with caplog.at_level(logging.ERROR), write_locked(db):
            journal.turn_ended("sess_a", COMPACTED, rewritten=True)
            assert journal.flush(timeout=LONG_BUSY_S)  # failed writes count as done
        assert any("the history of sess_a was not saved" in r.getMessage() for r in caplog.records)
        assert store.sessions.load("sess_a").history == LONG
        journal.turn_ended("sess_a", NEXT)
        assert journal.flush(timeout=LONG_BUSY_S)
        assert store.sessions.load("sess_a").history == NEXT
