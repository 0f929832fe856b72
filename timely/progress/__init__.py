"""Pure, synchronous progress tracking (layer 1). No asyncio here: this is the part that must be
right, so it is plain code that tests can drive step by step."""

from .accumulator import ProgressAccumulator
from .antichain import Antichain, MutableAntichain
from .reachability import Pointstamp, Reachability, Step
from .summary import PathSummary
from .tracker import ChangeBatch, ProgressTracker

__all__ = [
    "Antichain",
    "ChangeBatch",
    "MutableAntichain",
    "PathSummary",
    "Pointstamp",
    "ProgressAccumulator",
    "ProgressTracker",
    "Reachability",
    "Step",
]
