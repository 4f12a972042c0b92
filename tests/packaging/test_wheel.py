"""The built wheel, installed as a hosting daemon would install it.

toolprep lives inside agent daemons that have modules of their own; a wheel that put
``messages`` or ``runtime`` at the top of site-packages would break them (or be broken by
them, depending on path order). These tests build the real wheel, install it into a fresh
venv and import it next to a daemon that owns exactly those names.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAPPED = {
    "messages": "toolprep.messages",
    "actors": "toolprep.actors",
    "runtime": "toolprep.runtime",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        check=True,
        timeout=600,
    )
    (built,) = out.glob("toolprep-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding the wheel; dependencies come from the test venv's site-packages.

    The dependencies are reached through a plain path line, so the test venv's editable
    install of toolprep (an import hook started by a ``.pth`` file there) stays out of sight.
    """
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=False)
    python = root / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        timeout=600,
    )
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    yield python


def _top_level_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/", 1)[0] for name in archive.namelist()}


def test_wheel_puts_one_import_name_into_site_packages(wheel: Path) -> None:
    name, version = wheel.name.split("-")[:2]
    assert _top_level_names(wheel) == {"toolprep", f"{name}-{version}.dist-info"}


def test_wheel_holds_every_source_package_and_resource(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        packed = set(archive.namelist())
    for folder, package in MAPPED.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.relative_to(REPO / folder).parent
            dotted = ".".join([package, *relative.parts])
            assert f"{dotted.replace('.', '/')}/__init__.py" in packed, f"{dotted} is not packaged"
        for module in (REPO / folder).rglob("*.py"):
            inside = module.relative_to(REPO / folder)
            assert f"{package.replace('.', '/')}/{inside.as_posix()}" in packed
    assert "toolprep/py.typed" in packed
    for resource in (REPO / "runtime" / "replay").iterdir():
        assert f"toolprep/runtime/replay/{resource.name}" in packed


KIT = {"__init__.py", "provider.py", "sse.py", "daemon.py", "ray_cluster.py"}
"""``toolprep.testing``: the loopback provider, its SSE builders and the small helpers that go
with them. The load generator and the benchmarks' tool live in ``benchmarks/``, not installed."""
NOT_INSTALLED = ("bench", "load", "sse_server", "loopback", "soak", "stream_floor")


def test_wheel_holds_the_test_kit_and_no_benchmark_or_load_generator(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        modules = [name for name in archive.namelist() if name.endswith(".py")]
    kit = {name.removeprefix("toolprep/testing/") for name in modules if "/testing/" in name}
    assert kit == KIT
    for name in modules:
        stem = name.rsplit("/", 1)[-1].removesuffix(".py")
        assert not stem.startswith(NOT_INSTALLED), f"{name} is benchmark code in the wheel"
        assert not name.startswith("benchmarks/"), name


def test_installed_kit_streams_both_wires_to_the_real_sdks(installed: Path, tmp_path: Path) -> None:
    """What an embedder gets from ``pip install toolprep``: the loopback provider and its
    builders, enough to run the official SDKs against scripted turns, with no checkout."""
    probe = textwrap.dedent(
        """
        import anthropic, openai
        from toolprep.testing import FakeProviderServer, ScriptedResponse, anthropic_sse, openai_sse

        with FakeProviderServer() as server:
            server.enqueue(
                ScriptedResponse(events=anthropic_sse("Hello over Anthropic")),
                ScriptedResponse(events=openai_sse("Hello over OpenAI")),
            )
            with anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0) as a:
                with a.messages.stream(
                    model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
                ) as stream:
                    print(stream.get_final_text())
            with openai.OpenAI(base_url=server.base_url + "/v1", api_key="k", max_retries=0) as o:
                chunks = o.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                print("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
            print([r.path for r in server.requests])
        """
    )
    result = subprocess.run(
        [str(installed), "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Hello over Anthropic",
        "Hello over OpenAI",
        "['/v1/messages', '/v1/chat/completions']",
    ]


def test_daemon_with_its_own_messages_and_runtime_imports_toolprep(
    installed: Path, tmp_path: Path
) -> None:
    daemon = tmp_path / "daemon"
    (daemon / "runtime").mkdir(parents=True)
    (daemon / "messages.py").write_text("OWNER = 'daemon'\n")
    (daemon / "runtime" / "__init__.py").write_text("OWNER = 'daemon'\n")
    probe = textwrap.dedent(
        """
        import messages, runtime
        import toolprep.runtime.hosting.runtime, toolprep.messages.turns, toolprep.actors.base
        from importlib.resources import files
        assert messages.OWNER == "daemon" and runtime.OWNER == "daemon"
        assert (files("toolprep.runtime") / "replay" / "default.json").is_file()
        print(toolprep.runtime.hosting.runtime.__file__)
        """
    )
    result = subprocess.run(
        [str(installed), "-c", probe],
        cwd=daemon,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    host_file = Path(result.stdout.strip())
    assert host_file.is_relative_to(installed.parent.parent), host_file
    assert not host_file.is_relative_to(REPO)


def test_installed_console_script_runs(installed: Path) -> None:
    script = installed.parent / "toolprep"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "acp" in result.stdout
