"""``timely run --console`` without the console extra says so before it announces an address
(it used to print the console's URL and then fail in process 0)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support import clean_env
from tests.support.launcher import script, timely


def test_the_launcher_refuses_the_console_without_its_extra_before_announcing_it(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "aiohttp"  # an environment where the extra is not installed
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'aiohttp'\")\n")
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(shadow.parent), env["PYTHONPATH"]])
    prog = script(tmp_path, "print('RAN')\n")
    result = timely("run", "-n", "2", "--console", "0", prog, env=env)
    assert result.returncode == 2
    assert "--console needs the console extra" in result.stderr
    assert "pip install 'timely-dataflow[console]'" in result.stderr
    assert "console at" not in result.stderr + result.stdout and "RAN" not in result.stdout
    # and with the extra, the same command announces the console and runs the program
    result = timely("run", "-n", "2", "--console", "0", prog)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("RAN") == 2
