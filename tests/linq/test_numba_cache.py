"""linq's compiled loops are cached per user (or in NUMBA_CACHE_DIR), never in the source tree;
a first compile is announced before it starts; a second process loads instead of compiling.

Each run is a fresh interpreter whose home is a temporary directory, so the cache it finds is
the one this test made: the first compiles (seconds), the others must not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a cold compile: 10 s idle, a minute loaded

PROBE = r"""
import json, logging, sys, time
from numba.core import config
from numba.core.dispatcher import Dispatcher

NAME = "timely_libs.linq._columns._compiled"
said = []

class Note(logging.Handler):
    def emit(self, record):
        module = sys.modules.get(NAME)
        loops = [v for v in vars(module).values() if isinstance(v, Dispatcher)] if module else []
        said.append({"message": record.getMessage(), "loops_defined": len(loops)})

logging.getLogger("timely").addHandler(Note())
started = time.perf_counter()
import timely_libs.linq._columns._compiled as compiled
loops = [v for v in vars(compiled).values() if isinstance(v, Dispatcher)]
print(json.dumps({
    "said": said,
    "loops": len(loops),
    "compiled": sum(bool(f.stats.cache_misses) for f in loops),
    "loaded": sum(bool(f.stats.cache_hits) for f in loops),
    "cache_paths": sorted({f.stats.cache_path for f in loops}),
    "numba_cache_dir_after": config.CACHE_DIR,
    "seconds": time.perf_counter() - started,
}))
"""


def probe(home: Path, numba_cache_dir: Path | None = None) -> dict:
    env = {k: v for k, v in clean_env().items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    if numba_cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_cache_dir)
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=home, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def compiled_files_in_the_source_tree() -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in (ROOT / "libs").rglob("*.nb[ic]")}


def test_the_cache_is_per_user_announced_first_and_reused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    in_tree = compiled_files_in_the_source_tree()
    user_cache = home / ".cache" / "timely" / "numba"

    first = probe(home)
    assert first["loops"] >= 10 and first["compiled"] == first["loops"], first
    # Announced while no loop was defined yet, so before the first compile began.
    assert [s["loops_defined"] for s in first["said"]][:1] == [0], first["said"]
    assert "compiling" in first["said"][0]["message"] and str(user_cache) in first["said"][0]["message"]
    assert all(Path(p).is_relative_to(user_cache) for p in first["cache_paths"]), first["cache_paths"]
    assert list(user_cache.rglob("*.nbi")) and list(user_cache.rglob("*.nbc"))
    assert compiled_files_in_the_source_tree() == in_tree  # nothing written beside the source
    assert first["numba_cache_dir_after"] == ""  # the user's own numba code keeps numba's default

    second = probe(home)
    assert second["compiled"] == 0 and second["loaded"] == second["loops"], second
    assert not any("compiling" in s["message"] for s in second["said"]), second["said"]

    # NUMBA_CACHE_DIR wins: a copy of the cache there is what a process loads from.
    chosen = tmp_path / "chosen"
    shutil.copytree(user_cache, chosen)
    shutil.rmtree(user_cache)
    third = probe(home, chosen)
    assert third["compiled"] == 0 and third["loaded"] == third["loops"], third
    assert all(Path(p).is_relative_to(chosen) for p in third["cache_paths"])
    assert not user_cache.exists()
    assert third["numba_cache_dir_after"] == str(chosen)  # the user's setting, left as it was
    print(f"second process: loops loaded in {second['seconds']:.2f} s (first compiled in {first['seconds']:.2f} s)")


def test_without_a_usable_home_the_cache_is_a_per_user_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster executor may have no home it can write (here: HOME is a file, which even root
    cannot make a directory in): the cache still goes nowhere near the source."""
    import tempfile

    from timely_libs import _numba_cache

    home = tmp_path / "not-a-directory"
    home.write_text("")
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    where = _numba_cache.cache_dir()
    assert where.parent == Path(tempfile.gettempdir()) and where.name == f"timely-numba-{os.getuid()}"
    if sys.platform.startswith("linux"):  # the platform's own variable
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert _numba_cache.cache_dir() == tmp_path / "xdg" / "timely" / "numba"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "chosen"))
    assert _numba_cache.cache_dir() == tmp_path / "chosen"
