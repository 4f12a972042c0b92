"""``toolprep serve`` refuses host options that do not go together, before it starts anything.

The rules are checked where the CLI checks them (``check_serve_arguments``), in this
process; two tests start the real daemon to see that it says so and exits with status 2
before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.daemon_process import refused_start
from toolprep.runtime.cli.main import build_parser
from toolprep.runtime.cli.serve import check_serve_arguments

STARTS_IN_S = 60


def refusal(*options: str, environ: Mapping[str, str] | None = None) -> str:
    """What ``toolprep serve --no-persist OPTIONS`` refuses to start with (``environ``: the
    variables it would see, by default none)."""
    args = build_parser().parse_args(["serve", "--no-persist", *options])
    with pytest.raises((ValueError, OSError)) as refused:
        check_serve_arguments(args, environ or {})
    return str(refused.value)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--shards", "2"], "--shards goes with --ray ADDRESS"),
        (["--ray", "127.0.0.1:1", "--workers", "2"], "--workers does not go with --ray"),
        (["--ray", "127.0.0.1:1", "--shards", "0"], "--shards must be >= 1, got 0"),
        (["--max-mcp-tools", "0"], "--max-mcp-tools must be >= 1, got 0"),
    ],
)
def test_serve_explains_host_options_that_do_not_go_together(options: list[str], said: str) -> None:
    assert said in refusal(*options)


def test_the_daemon_refuses_host_options_that_do_not_go_together(tmp_path: Path) -> None:
    said = refused_start(tmp_path, "--shards", "2", timeout=STARTS_IN_S)
    assert "toolprep: --shards goes with --ray ADDRESS; on one machine use --workers N" in said


TOKEN_ON_COMMAND_LINE = (
    "a token on the command line is readable by every process of this machine: "
    "use --token-file or TOOLPREP_TOKEN"
)


@pytest.mark.parametrize("token", ["s3cret", ""])
def test_a_token_on_the_command_line_is_refused_first(token: str) -> None:
    # --workers 0 is refused too, but the token goes first.
    said = refusal("--token", token, "--workers", "0")
    assert TOKEN_ON_COMMAND_LINE in said
    assert "--workers" not in said


def test_the_daemon_refuses_a_token_on_the_command_line_before_anything_starts(
    tmp_path: Path,
) -> None:
    said = refused_start(tmp_path, "--token", "s3cret", "--workers", "0", timeout=STARTS_IN_S)
    assert f"toolprep: --token: {TOKEN_ON_COMMAND_LINE}" in said
    assert "--workers" not in said
    assert not (tmp_path / "data-home").exists()


def test_an_empty_token_from_the_environment_is_refused() -> None:
    for empty in ("", "  "):
        said = refusal("--workers", "0", environ={"TOOLPREP_TOKEN": empty})
        assert "TOOLPREP_TOKEN is empty: an empty token would let anyone in" in said


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "is empty: an empty token would let anyone in"),
        (b"\n\nsecond line\n", "is empty: an empty token would let anyone in"),
        (b"two words\n", "holds spaces or characters other than printable ASCII"),
        (b"caf\xc3\xa9\n", "is not ASCII"),
    ],
)
def test_a_token_file_without_a_usable_token_is_refused(
    content: bytes, said: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_bytes(content)
    refused = refusal("--token-file", str(token_file), "--workers", "0")
    assert f"the token file {token_file} {said}" in refused


def test_a_short_token_is_refused_on_a_non_loopback_address_only(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_bytes(b"short-token\n")
    said = refusal("--token-file", str(token_file), "--host", "0.0.0.0", "--workers", "0")
    assert "refusing to serve on 0.0.0.0 with the token file's token of 11 characters" in said
    assert "needs at least 16" in said
    said = refusal("--host", "192.0.2.1", "--workers", "0", environ={"TOOLPREP_TOKEN": "envtok"})
    assert "with TOOLPREP_TOKEN of 6 characters" in said

    args = build_parser().parse_args(["serve", "--no-persist", "--token-file", str(token_file)])
    assert check_serve_arguments(args, {}).token.value == "short-token"


def test_a_missing_token_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token"
    said = refusal("--token-file", str(missing))
    assert f"cannot read the token file {missing}: No such file or directory" in said


@pytest.mark.parametrize("origin", ["null", "NULL", " null "])
def test_the_null_origin_is_never_allowed(origin: str) -> None:
    said = refusal(
        "--allow-origin", "https://ok.example", "--allow-origin", origin, "--workers", "0"
    )
    assert "--allow-origin null: the 'null' origin is what every sandboxed frame" in said
    assert "it is never allowed" in said


@pytest.mark.parametrize("origin", ["*", "editor.example", "https://editor.example/path", ""])
def test_an_allowed_origin_must_be_an_origin(origin: str) -> None:
    said = refusal("--allow-origin", origin)
    assert f"--allow-origin {origin!r} is not an origin: give scheme://host[:port]" in said
