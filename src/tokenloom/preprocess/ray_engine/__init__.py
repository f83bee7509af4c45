"""Preprocessing on a Ray cluster (``tokenloom preprocess --engine ray``).

:func:`preprocess_ray` cuts the inputs into shards, runs the local engine
(:func:`tokenloom.preprocess.preprocess`) on each shard as a Ray task, and merges the
shards in input order, so the output is byte-identical to a local run whatever the
number of shards, workers or nodes.  Finished shards carry completion markers, so a
re-run after a crash redoes only what is missing or changed.  See ``docs/ray.md``.

Ray (``pip install 'tokenloom[ray]'``) is imported only when a run starts.
"""

from tokenloom.preprocess.ray_engine.engine import preprocess_ray
from tokenloom.preprocess.ray_engine.merge import merge_shards, read_prefix_list
from tokenloom.preprocess.ray_engine.plan import Piece, Shard, plan_shards
from tokenloom.preprocess.ray_engine.report import RaySummary, ShardReport

__all__ = [
    "preprocess_ray",
    "plan_shards",
    "Shard",
    "Piece",
    "merge_shards",
    "read_prefix_list",
    "RaySummary",
    "ShardReport",
]
