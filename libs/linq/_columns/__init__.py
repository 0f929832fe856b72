"""Columnar differences: blocks, codes, the kernels that sort and sum them, their wire form."""

from ._block import SCALAR, Block, block_of_codes, blocks_of, codes_of, column_of, concat_blocks
from ._codes import INTERNED, PAIRS, all_ints, code_of, route_of, route_of_value, values_of
from ._kernels import (
    COMPILED_ROWS,
    EMPTY,
    FEW_KEYS,
    POLICY,
    Policy,
    compiled_keys,
    compiled_loops,
    consolidate,
    consolidate_parts,
    consolidation,
    distinct,
    group_starts,
    order,
    preload,
    ranges,
    selector,
    summed_rows,
    time_runs,
)
from ._wire import register

register()

__all__ = [
    "COMPILED_ROWS",
    "EMPTY",
    "FEW_KEYS",
    "INTERNED",
    "PAIRS",
    "POLICY",
    "Policy",
    "SCALAR",
    "Block",
    "all_ints",
    "block_of_codes",
    "blocks_of",
    "code_of",
    "codes_of",
    "column_of",
    "compiled_keys",
    "compiled_loops",
    "concat_blocks",
    "consolidate",
    "consolidate_parts",
    "consolidation",
    "distinct",
    "group_starts",
    "time_runs",
    "order",
    "preload",
    "ranges",
    "route_of",
    "route_of_value",
    "selector",
    "summed_rows",
    "values_of",
]
