"""``python -m tokenloom.megatron SCRIPT [ARGS...]``: run an unmodified Megatron-LM script
with tokenloom's data pipeline (``tokenloom.megatron.install()`` first).

Also ``python -m tokenloom.megatron -m MODULE [ARGS...]`` for a module, and under
torchrun: ``torchrun --nproc-per-node 8 -m tokenloom.megatron pretrain_gpt.py ARGS...``.
The script runs as ``__main__`` with ``sys.argv`` and ``sys.path[0]`` as if it had been
started directly.

``--mixture-change FILE`` (before the script) sets ``TOKENLOOM_MIXTURE_CHANGE=FILE``: the
train split continues a saved run under a changed mixture (docs/mixtures.md).
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = """\
usage: python -m tokenloom.megatron [--mixture-change FILE] SCRIPT [ARGS...]
       python -m tokenloom.megatron [--mixture-change FILE] -m MODULE [ARGS...]

Runs a Megatron-LM script (pretrain_gpt.py, tools/preprocess_data.py, pytest, ...)
unchanged, with megatron.core.datasets served by tokenloom. Works under torchrun:
  torchrun --nproc-per-node 8 -m tokenloom.megatron pretrain_gpt.py --data-path ...
--mixture-change FILE: resume with a changed mixture (sets TOKENLOOM_MIXTURE_CHANGE;
  the file names the old run's data and consumed samples; docs/mixtures.md)
"""


def main(argv: list[str]) -> int:
    """Install the layer and run ``argv`` (a script path, or ``-m MODULE``)."""
    if argv and argv[0] == "--mixture-change":
        if len(argv) < 3:
            sys.stderr.write("tokenloom.megatron: --mixture-change needs FILE and a script\n")
            return 2
        from tokenloom.errors import ConfigError
        from tokenloom.training.megatron_resume import ENVIRONMENT_VARIABLE, read_mixture_change

        try:  # fail before the script starts, not at its dataset build
            read_mixture_change(argv[1])
        except ConfigError as error:
            sys.stderr.write(f"tokenloom.megatron: {error}\n")
            return 2
        os.environ[ENVIRONMENT_VARIABLE] = argv[1]
        argv = argv[2:]
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
