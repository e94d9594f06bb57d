"""Where this copy of sopt was built from: the git commit, recorded in env.json.

In a source checkout ``GIT_COMMIT`` stays None and sopt asks git (``git_commit``); ``pip install .`` from a
checkout runs ``hatch_build.py``, which writes this file into the wheel with ``GIT_COMMIT`` set to the
checkout's commit at install time, since an installed copy has no ``.git`` to ask. Standard library only: the
build hook loads this file before sopt's dependencies are installed.
"""

from __future__ import annotations

import pathlib
import subprocess

GIT_COMMIT: str | None = None   # the build hook replaces this line in the installed copy


def git_commit(root: pathlib.Path) -> str | None:
    """The commit checked out at ``root`` (with "+dirty" when tracked files differ from it), or None when ``root``
    is no git checkout or git cannot be run."""
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
