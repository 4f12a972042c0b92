"""Another revision's interpreter, to run a benchmark against (``--baseline-python``).

``python -m benchmarks.revision REF`` makes (or reuses) a git worktree of this repository
at REF under ``.revisions/<commit>/`` (ignored by git), with its own virtualenv holding
that revision's ``toolprep`` installed editable (with the ``uvloop`` extra, as the
current side runs), and prints the virtualenv's python path on stdout; progress goes to
stderr. So a comparison with the previous commit is::

    base="$(.venv/bin/python -m benchmarks.revision HEAD~1)"
    .venv/bin/python -m benchmarks.load --mode embedded,cli --baseline-python "$base"

A worktree is named by the commit REF resolves to, so a branch name that moved gets a
fresh one; ``--remove`` deletes the worktree of REF again.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks._harness import REPO

__all__ = ["REVISIONS", "main", "remove_revision", "revision_python"]

REVISIONS = REPO / ".revisions"
"""Where the worktrees live (in ``.gitignore``)."""


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _commit(ref: str) -> str:
    return _git("rev-parse", "--verify", f"{ref}^{{commit}}")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def revision_python(ref: str) -> Path:
    """The python of REF's virtualenv, made first if it is missing or unfinished."""
    commit = _commit(ref)
    tree = REVISIONS / commit[:12]
    python = tree / ".venv" / "bin" / "python"
    ready = tree / ".venv" / "toolprep-installed"
    if ready.is_file():
        return python
    if not (tree / ".git").exists():
        _say(f"worktree {tree} at {commit[:12]} ({ref})")
        REVISIONS.mkdir(exist_ok=True)
        _git("worktree", "add", "--detach", str(tree), commit)
    if not python.is_file():
        _say(f"virtualenv {tree / '.venv'}")
        subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True, timeout=300)
    _say("installing that revision's toolprep (pip install -e '.[uvloop]')")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-e", ".[uvloop]"],
        cwd=tree,
        check=True,
        timeout=1800,
    )
    ready.write_text(commit + "\n", encoding="ascii")
    return python


def remove_revision(ref: str) -> None:
    """Delete REF's worktree (and its virtualenv) if there is one."""
    tree = REVISIONS / _commit(ref)[:12]
    if (tree / ".git").exists():
        _git("worktree", "remove", "--force", str(tree))
    shutil.rmtree(tree, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("ref", help="a git revision: a commit, a branch, HEAD~1, main, ...")
    parser.add_argument("--remove", action="store_true", help="delete REF's worktree instead")
    args = parser.parse_args(argv)
    try:
        if args.remove:
            remove_revision(args.ref)
        else:
            print(revision_python(args.ref))
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"benchmarks.revision: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
