"""``toolprep serve`` refuses host options that do not go together, before it starts anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon_process import refused_start

STARTS_IN_S = 60


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--shards", "2"], "--shards goes with --ray ADDRESS"),
        (["--ray", "127.0.0.1:1", "--workers", "2"], "--workers does not go with --ray"),
        (["--ray", "127.0.0.1:1", "--shards", "0"], "--shards must be >= 1, got 0"),
        (["--max-mcp-tools", "0"], "--max-mcp-tools must be >= 1, got 0"),
    ],
)
def test_serve_explains_host_options_that_do_not_go_together(
    options: list[str], said: str, tmp_path: Path
) -> None:
    assert said in refused_start(tmp_path, *options, timeout=STARTS_IN_S)
