"""The asyncio actor runtime (layer 4, private): workers, scheduling, routing, progress, lifecycle."""
