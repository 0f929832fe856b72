"""Runs one case of tests/support/dataflows.py in this process of a cluster and prints its result.

timely run -n 3 -m tests.support.cluster_driver CASE_NAME
"""

from __future__ import annotations

import json
import sys

import timely
from tests.support.dataflows import CASES

case_fn, _ = CASES[sys.argv[1]]
with timely.execute(case_fn, timeout=60) as (comp, case):
    case.feed()
print("RESULT " + json.dumps(case.result()), flush=True)
