"""The per-user cache folder: where singa keeps what it makes at run time.

Nothing is ever written next to the installed package (a package folder may be read-only,
and files that ``pip`` did not install survive an uninstall, where they leave a stray
``singa`` folder that shadows the next install). Compiled kernels (numba's cache) and
downloaded data sets go below :func:`user_cache_dir` instead:

- ``$SINGA_CACHE_DIR`` when set and non-empty;
- else the platform's per-user cache folder with ``singa`` appended: ``$XDG_CACHE_HOME``
  (default ``~/.cache``) on Linux and other Unix systems, ``~/Library/Caches`` on macOS,
  ``%LOCALAPPDATA%`` on Windows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["CACHE_ENV", "user_cache_dir"]

#: the environment variable that overrides the cache folder
CACHE_ENV = "SINGA_CACHE_DIR"


def _platform_cache_root() -> Path:
    if sys.platform == "darwin":
        return Path("~/Library/Caches").expanduser()
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg else Path("~/.cache").expanduser()


def user_cache_dir(*parts: str) -> Path:
    """The folder ``parts`` below singa's per-user cache folder (not created here)."""
    env = os.environ.get(CACHE_ENV)
    root = Path(env).expanduser() if env else _platform_cache_root() / "singa"
    return root.joinpath(*parts)
