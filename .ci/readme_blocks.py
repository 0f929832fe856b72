"""Run every python block of a README with this interpreter, each alone in an empty directory,
and compare what it prints with the text block after it (as tests/test_readme.py does in the
checkout). `.ci/wheel` runs it with the Python of an environment that has only the built wheel
installed, from a directory outside the checkout, so every import comes from the wheel.

    python readme_blocks.py README.md
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n", re.S | re.M)


def main(readme: str) -> int:
    text = Path(readme).read_text()
    found = [(m.group(1), m.group(2), m.start(), m.end()) for m in BLOCK.finditer(text)]
    failed = ran = 0
    for i, (language, code, start, end) in enumerate(found):
        if language != "python":
            continue
        line = text.count("\n", 0, start) + 1
        printed = None
        if i + 1 < len(found) and found[i + 1][0] == "text":
            between = text[end : found[i + 1][2]].splitlines()
            if all(not s.strip() or s.strip().endswith(":") for s in between):  # only "It prints:" lines
                printed = found[i + 1][1]
        with tempfile.TemporaryDirectory(prefix="readme-block-") as where:
            (Path(where) / "block.py").write_text(code)
            done = subprocess.run([sys.executable, "block.py"], cwd=where, capture_output=True, text=True, timeout=300)
        ran += 1
        if done.returncode != 0:
            print(f"README line {line}: exit status {done.returncode}\n{done.stderr[-3000:]}", file=sys.stderr)
            failed += 1
        elif printed is not None and done.stdout.splitlines() != printed.splitlines():
            print(f"README line {line} printed:\n{done.stdout}instead of:\n{printed}", file=sys.stderr)
            failed += 1
        else:
            print(f"README line {line}: ok")
    print(f"{ran - failed} of {ran} python blocks ran and printed what the README shows")
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
