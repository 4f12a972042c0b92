"""``eventually``: returns as soon as its check holds, fails with what it last saw when it never
does. The states the checks wait for are counters the checks themselves advance, so no test
here depends on a clock but the deadline of a check that never holds."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.eventually import eventually, eventually_async


def test_returns_the_first_true_value_without_further_checks() -> None:
    calls: list[int] = []

    def third_time_lucky() -> str:
        calls.append(1)
        return "ready" if len(calls) == 3 else ""

    assert eventually(third_time_lucky, interval=0) == "ready"
    assert len(calls) == 3


def test_an_assertion_that_holds_later_passes() -> None:
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        assert len(calls) >= 2, "not yet"
        return True

    assert eventually(check, interval=0) is True
    assert len(calls) == 2


def test_a_check_that_never_holds_fails_with_its_last_assertion() -> None:
    def check() -> bool:
        assert 1 + 1 == 3, "arithmetic still holds"
        return True

    with pytest.raises(AssertionError, match="arithmetic still holds") as failure:
        eventually(check, timeout=0.2, what="the sum")
    assert "the sum: did not hold within 0.2 s" in str(failure.value)
    assert isinstance(failure.value.__cause__, AssertionError)


def test_a_check_that_stays_false_fails_with_its_last_value() -> None:
    seen: list[int] = []

    def growing() -> list[int]:
        seen.append(len(seen))
        return []

    with pytest.raises(AssertionError, match=r"last value: \[\]"):
        eventually(growing, timeout=0.2)
    assert len(seen) > 1, "the check was tried again until the deadline"


def test_an_assertion_style_check_without_a_return_never_passes() -> None:
    def forgot_to_return_true() -> None:
        assert True

    with pytest.raises(AssertionError, match="last value: None"):
        eventually(forgot_to_return_true, timeout=0.1)


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def broken() -> bool:
        calls.append(1)
        raise KeyError("a bug, not a state")

    with pytest.raises(KeyError):
        eventually(broken)
    assert calls == [1]


async def test_the_async_form_lets_the_loop_change_the_state() -> None:
    flag: list[bool] = []

    async def later() -> None:
        await asyncio.sleep(0)
        flag.append(True)

    task = asyncio.create_task(later())
    assert await eventually_async(lambda: flag, interval=0) == [True]
    await task


async def test_the_async_form_fails_with_its_last_value() -> None:
    with pytest.raises(AssertionError, match="last value: 0"):
        await eventually_async(lambda: 0, timeout=0.1)
