"""``code_block``: the Markdown fence around tool output can never be closed by the output."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolprep.runtime.tools.acp_shapes import code_block

TEXT = st.text(alphabet=st.sampled_from(["`", "a", "\n", " ", "~"]), max_size=200)


@given(TEXT)
def test_the_fence_is_longer_than_any_backtick_run_and_wraps_the_text(text: str) -> None:
    block = code_block(text, "sh")
    fence = block[: block.index("sh\n")]
    assert set(fence) == {"`"} and len(fence) >= 3
    longest_inside = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest_inside = max(longest_inside, run)
    assert len(fence) == max(3, longest_inside + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    assert block == f"{fence}sh\n{body}{fence}"


def test_output_with_triple_backticks_gets_a_four_backtick_fence() -> None:
    assert code_block("see ```py\nx\n```") == "````\nsee ```py\nx\n```\n````"
    assert code_block("plain") == "```\nplain\n```"
    assert code_block("") == "```\n```"
