"""The ``--engine ray`` flags of ``tokenloom preprocess`` (Ray is not imported here)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError

ENGINE_HELP = """\
where the tokenising runs: 'local' (this machine, the default) or 'ray' (Ray tasks,
one shard each, merged in input order: the same bytes as 'local'; needs
pip install 'tokenloom[ray]').  Without --address a private local Ray cluster is
started for the run (RAY_TMPDIR is honoured) and stopped at its end."""


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--engine`` and the Ray engine's options to the preprocess parser."""
    group = parser.add_argument_group("engine (see docs/ray.md)")
    group.add_argument("--engine", choices=("local", "ray"), default="local", help=ENGINE_HELP)
    group.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="Ray cluster to run on (auto, HOST:PORT or ray://HOST:PORT); the "
        "inputs and the output folder must be on a file system every "
        "node sees",
    )
    group.add_argument(
        "--num-shards",
        type=int,
        default=None,
        metavar="N",
        help="target number of shards (default: 2 per task slot of the cluster, "
        "or one per 256 MiB of input if more); fix it to reuse finished "
        "shards when re-running on another cluster",
    )
    group.add_argument(
        "--no-merge",
        action="store_true",
        help="keep the shards and write P_{key}_document.prefixes, a blend list "
        "(Megatron's --data-args-path; tokenloom.preprocess.ray_engine."
        "read_prefix_list) instead of merging",
    )
    group.add_argument(
        "--keep-shards", action="store_true", help="keep the shard folder P_shards/ after merging"
    )
    group.add_argument(
        "--max-retries",
        type=int,
        default=3,
        metavar="N",
        help="retries (0 to 100) of a shard whose worker or node dies or that hits an I/O "
        "error (default 3)",
    )
    group.add_argument(
        "--connect-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --address: give up after this long when no Ray cluster answers there, "
        "with an error naming the address (default: TOKENLOOM_RAY_CONNECT_TIMEOUT_S, else 15)",
    )


_RAY_ONLY = ("address", "num_shards", "no_merge", "keep_shards", "connect_timeout")


def engine_from_args(args: argparse.Namespace, local: Callable[..., Any]) -> Callable[..., Any]:
    """The preprocess function the arguments ask for: ``local``, or the Ray engine."""
    if read_attribute(args, "engine", "local") != "ray":
        given = [
            name for name in _RAY_ONLY if read_attribute(args, name, None) not in (None, False)
        ]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise ConfigError(f"{flag} applies to --engine ray only; add --engine ray")
        return local
    from tokenloom.preprocess.ray_engine.connect import connect_timeout_s, parse_address
    from tokenloom.preprocess.ray_engine.engine import preprocess_ray
    from tokenloom.preprocess.ray_engine.options import check_max_retries, check_num_shards

    check_num_shards(args.num_shards)  # every number is checked before anything starts
    check_max_retries(args.max_retries)
    keywords = {}
    if args.connect_timeout is not None:
        connect_timeout_s(args.connect_timeout)
        keywords["connect_timeout_s"] = args.connect_timeout
    if args.address is not None:
        parse_address(args.address)
    return functools.partial(
        preprocess_ray,
        address=args.address,
        num_shards=args.num_shards,
        merge=not args.no_merge,
        keep_shards=args.keep_shards,
        max_retries=args.max_retries,
        **keywords,
    )


__all__ = ["add_engine_flags", "engine_from_args"]
