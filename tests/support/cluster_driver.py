"""Runs one case of tests/dataflows.py in this process of a cluster and prints its result.

timely run -n 3 tests/cluster_driver.py CASE_NAME
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import timely
from tests.dataflows import CASES

case_fn, _ = CASES[sys.argv[1]]
with timely.execute(case_fn, timeout=60) as (comp, case):
    case.feed()
print("RESULT " + json.dumps(case.result()), flush=True)
