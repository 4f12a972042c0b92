"""A request declaring 20,000 tools (a hostile MCP server's) costs the stream no quadratic work.

The names count every comparison and prefix test made with them and fail
the test as soon as the count passes what an n log n index needs, so a
pass over all pairs fails at once instead of running for minutes.
"""

from __future__ import annotations

import math
from typing import ClassVar, SupportsIndex

from tests.providers.test_openai_adapter import calls, chunk, item, per_event
from toolprep.runtime.providers.openai_adapter import OpenAIStreamAdapter

N = 20_000
BUDGET = 2 * N * math.ceil(math.log2(N))
"""Comparisons sorting N names once takes, with room to spare; all pairs take N * N."""


class CountedName(str):
    """A tool name that counts what is done with it."""

    operations: ClassVar[int] = 0

    @classmethod
    def _count(cls) -> None:
        cls.operations += 1
        assert cls.operations <= BUDGET, f"over {BUDGET} operations on {N} tool names"

    def __lt__(self, other: str) -> bool:
        CountedName._count()
        return str.__lt__(self, other)

    def __gt__(self, other: str) -> bool:
        CountedName._count()
        return str.__gt__(self, other)

    def __ne__(self, other: object) -> bool:
        CountedName._count()
        return str.__ne__(self, other)

    def startswith(
        self,
        prefix: str | tuple[str, ...],
        start: SupportsIndex | None = None,
        end: SupportsIndex | None = None,
        /,
    ) -> bool:
        CountedName._count()
        return str.startswith(self, prefix, start, end)


def test_twenty_thousand_declared_names_cost_n_log_n_and_nothing_without_calls() -> None:
    CountedName.operations = 0
    names = [CountedName(f"mcp__big__t{i}") for i in range(N)]
    adapter = OpenAIStreamAdapter(names)
    per_event(adapter, [chunk({"content": "Thinking."})])
    assert CountedName.operations == 0  # a response without tool calls never asks

    produced = per_event(
        adapter,
        [
            # t1 is declared, but t10... extend it: not complete until arguments start.
            chunk(calls(item(0, "call_a", "mcp__big__", ""))),
            chunk(calls(item(0, name="t1"))),
            chunk(calls(item(0, args="{}"))),
            # t19999 is extended by no declared name: complete as soon as it is whole.
            chunk(calls(item(1, "call_b", "mcp__big__t19999", ""))),
            chunk(finish="tool_calls"),
        ],
    )
    assert produced[:4] == [
        [],
        [],
        [("prep call_a mcp__big__t1",)],
        [("prep call_b mcp__big__t19999",)],
    ]
    assert 0 < CountedName.operations <= BUDGET
