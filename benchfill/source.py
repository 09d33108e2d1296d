"""Which code made a run: the version, and where benchfill runs from a git checkout, its commit.

The version alone says little between releases of benchfill (results moved between commits of one version
when its prompts were reworded: docs/sweep.md), so a run records the commit and whether files tracked by git
were changed from it, and a release's card shows them. An installed wheel has no commit: None.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

from benchfill import __version__


@functools.cache
def code_identity() -> dict[str, Any]:
    """``{"version", "git_commit", "git_dirty"}``; the last two None where the package is no git checkout
    (or git is not installed). Read once a process: git is asked twice, a few milliseconds each."""
    here = Path(__file__).resolve().parent
    commit = dirty = None
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # a look, not a write: git status refreshes its index otherwise
    try:
        top = _git(here, env, "rev-parse", "--show-toplevel")
        if top and (Path(top) / "benchfill" / "__init__.py").resolve() == here / "__init__.py":
            commit = _git(here, env, "rev-parse", "HEAD") or None
            status = _git(here, env, "status", "--porcelain", "--untracked-files=no")
            dirty = None if status is None else bool(status)
    except (OSError, subprocess.SubprocessError):
        commit = dirty = None
    return {"version": __version__, "git_commit": commit, "git_dirty": dirty if commit else None}


def _git(where: Path, env: dict[str, str], *args: str) -> str | None:
    out = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10, env=env,
                         check=False)
    return out.stdout.strip() if out.returncode == 0 else None


__all__ = ["code_identity"]
