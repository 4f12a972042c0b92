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


TOKEN_ON_COMMAND_LINE = (
    "a token on the command line is readable by every process of this machine: "
    "use --token-file or TOOLPREP_TOKEN"
)


@pytest.mark.parametrize("token", ["s3cret", ""])
def test_a_token_on_the_command_line_is_refused_before_anything_starts(
    token: str, tmp_path: Path
) -> None:
    # --workers 0 would be refused later, when the sessions' host is built: the token goes first.
    said = refused_start(tmp_path, "--token", token, "--workers", "0", timeout=STARTS_IN_S)
    assert TOKEN_ON_COMMAND_LINE in said
    assert "--workers" not in said
    assert not (tmp_path / "data-home").exists()


def test_an_empty_token_from_the_environment_is_refused(tmp_path: Path) -> None:
    for empty in ("", "  "):
        said = refused_start(
            tmp_path, "--workers", "0", env_extra={"TOOLPREP_TOKEN": empty}, timeout=STARTS_IN_S
        )
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
    refusal = refused_start(
        tmp_path, "--token-file", str(token_file), "--workers", "0", timeout=STARTS_IN_S
    )
    assert f"the token file {token_file} {said}" in refusal


def test_a_missing_token_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token"
    said = refused_start(tmp_path, "--token-file", str(missing), timeout=STARTS_IN_S)
    assert f"cannot read the token file {missing}: No such file or directory" in said


@pytest.mark.parametrize("origin", ["null", "NULL", " null "])
def test_the_null_origin_is_never_allowed(origin: str, tmp_path: Path) -> None:
    said = refused_start(
        tmp_path, "--allow-origin", "https://ok.example", "--allow-origin", origin, "--workers", "0"
    )
    assert "--allow-origin null: the 'null' origin is what every sandboxed frame" in said
    assert "it is never allowed" in said


@pytest.mark.parametrize("origin", ["*", "editor.example", "https://editor.example/path", ""])
def test_an_allowed_origin_must_be_an_origin(origin: str, tmp_path: Path) -> None:
    said = refused_start(tmp_path, "--allow-origin", origin, timeout=STARTS_IN_S)
    assert f"--allow-origin {origin!r} is not an origin: give scheme://host[:port]" in said
