"""Where numba keeps the libraries' compiled loops: a per-user cache directory, never the source tree.

numba's own default writes its cache beside the source (``__pycache__``) when it can: into a
developer's checkout, or, under a wheel, into site-packages (or nowhere, if that is read-only,
so every process compiled again). Here the libraries' loops go to ``NUMBA_CACHE_DIR`` when the
user set it, else to the platform's per-user cache directory (``$XDG_CACHE_HOME`` or
``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) under
``timely/numba``; where there is no writable home (some cluster executors) a per-user
directory of the machine's temporary directory. Every process of a user on a machine (each
Spark task of an executor, each process of ``timely run``) then shares one cache: the first
compiles, the others load.

The directory is numba's for the time a module's loops are defined (`use_cache_dir`, undone
by `restore`): the user's own numba functions keep numba's defaults.

`will_compile` tells beforehand whether a module's loops are in the cache, so that the pause
of a first compile (seconds) is announced before it starts rather than explained after it.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["ENV", "begin", "cache_dir", "finish", "restore", "use_cache_dir", "will_compile"]

ENV = "NUMBA_CACHE_DIR"
"""numba's own variable: where the user wants compiled code cached."""


def _user_cache_root() -> Path:
    """The platform's per-user cache directory (raises if there is no home)."""
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return Path(local) if local else Path.home() / "AppData" / "Local"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def cache_dir() -> Path:
    """Where compiled loops are cached: ``NUMBA_CACHE_DIR``, else the per-user cache directory."""
    chosen = os.environ.get(ENV)
    if chosen:
        return Path(chosen)
    try:
        path = _user_cache_root() / "timely" / "numba"
    except RuntimeError:  # no home directory to be found
        path = None
    if path is None or not _writable(path):
        user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
        path = Path(tempfile.gettempdir()) / f"timely-numba-{user}"
    return path


def use_cache_dir() -> str:
    """Make `cache_dir` numba's cache directory for the loops defined next; returns what to
    give `restore` once they are."""
    from numba.core import config

    saved: str = config.CACHE_DIR  # type: ignore[attr-defined]  # set from the environment at import
    config.CACHE_DIR = str(cache_dir())  # type: ignore[attr-defined]
    return saved


def restore(saved: str) -> None:
    """numba's cache directory as it was before `use_cache_dir`."""
    from numba.core import config

    config.CACHE_DIR = saved  # type: ignore[attr-defined]


def will_compile(source: str, loops: int) -> bool:
    """Whether defining the ``loops`` cached loops of the module ``source`` (its file) will
    compile any of them: fewer are in numba's cache for this very source and numba. Reads
    numba's index files as numba does (a version, then the source's stamp); anything
    unexpected counts as a compile. Call after `use_cache_dir`."""
    import numba
    from numba.core.caching import UserProvidedCacheLocator

    try:
        locator = UserProvidedCacheLocator(will_compile, source)
        stamp = locator.get_source_stamp()
        fresh = 0
        for index in Path(locator.get_cache_path()).glob(f"{Path(source).stem}.*.nbi"):
            with open(index, "rb") as f:  # an index of an older source (other lines) may linger
                fresh += pickle.load(f) == numba.__version__ and pickle.loads(f.read())[0] == stamp
    except Exception:  # an unreadable or foreign index: numba will compile
        return True
    return fresh < loops


def begin(source: str, announce: str) -> tuple[str, float]:
    """What a module of cached loops does before it defines them: `use_cache_dir`, and when
    any of its loops (its ``@njit(`` lines) will compile, ``announce`` on the ``timely.compile``
    logger with where they go, so that the pause is expected, not taken for a hang. Returns
    what to give `finish` once the loops are defined."""
    started = time.perf_counter()
    saved = use_cache_dir()
    if will_compile(source, Path(source).read_text().count("\n@njit(")):
        logging.getLogger("timely.compile").warning("%s into %s", announce, cache_dir())
    return saved, started


def finish(begun: tuple[str, float], namespace: dict[str, Any], module: str, who: str, loops: str) -> None:
    """What a module of cached loops does once it has defined them: `restore` numba's cache
    directory, and when any of the module's own loops (its ``namespace``'s dispatchers defined
    in ``module``) compiled, say once how many and in how long: the first import on a machine
    pauses for seconds inside whatever step first met a large array."""
    from numba.core.dispatcher import Dispatcher

    saved, started = begun
    restore(saved)
    mine = [f for f in namespace.values() if isinstance(f, Dispatcher) and f.py_func.__module__ == module]
    compiled = [f for f in mine if f.stats.cache_misses]
    if compiled:
        logging.getLogger("timely.compile").warning(
            "%s compiled %d %s with numba in %.1f s; once per machine (cached in %s)",
            who,
            len(compiled),
            loops,
            time.perf_counter() - started,
            compiled[0].stats.cache_path,
        )
