"""``python -m tokenloom.megatron SCRIPT [ARGS...]``: run an unmodified Megatron-LM script
with tokenloom's data pipeline (``tokenloom.megatron.install()`` first).

Also ``python -m tokenloom.megatron -m MODULE [ARGS...]`` for a module, and under
torchrun: ``torchrun --nproc-per-node 8 -m tokenloom.megatron pretrain_gpt.py ARGS...``.
The script runs as ``__main__`` with ``sys.argv`` and ``sys.path[0]`` as if it had been
started directly.
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = """\
usage: python -m tokenloom.megatron SCRIPT [ARGS...]
       python -m tokenloom.megatron -m MODULE [ARGS...]

Runs a Megatron-LM script (pretrain_gpt.py, tools/preprocess_data.py, pytest, ...)
unchanged, with megatron.core.datasets served by tokenloom. Works under torchrun:
  torchrun --nproc-per-node 8 -m tokenloom.megatron pretrain_gpt.py --data-path ...
"""


def main(argv: list[str]) -> int:
    """Install the layer and run ``argv`` (a script path, or ``-m MODULE``)."""
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if argv else 2
    import tokenloom.megatron

    tokenloom.megatron.install()
    if argv[0] == "-m":
        if len(argv) < 2:
            sys.stderr.write("tokenloom.megatron: -m needs a module name\n" + USAGE)
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    if not os.path.isfile(script):
        sys.stderr.write(f"tokenloom.megatron: {script}: no such script\n")
        return 2
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
