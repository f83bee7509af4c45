"""``tokenloom.megatron.install()`` and the launcher, with and without megatron-core.

Each check runs in a fresh subprocess (the import table is process state): with
megatron-core 0.16.1 on the path, and with no megatron at all.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from tests.support.megatron_core import megatron_env, require_megatron, run_json, run_python

from tokenloom.megatron import MODULES

pytestmark = pytest.mark.timeout(600)

CHECK_MODULES = r"""
import importlib, json, sys
import tokenloom.megatron as layer
layer.install(); layer.install()  # twice is harmless
report = {"finders": sum(type(f).__name__ == "Redirect" for f in sys.meta_path)}
for short in layer.MODULES:
    module = importlib.import_module("megatron.core.datasets." + short)
    report[short] = module.__name__
from megatron.core.datasets.gpt_dataset import GPTDataset as A
from tokenloom.megatron.datasets.gpt_dataset import GPTDataset as B
report["same_class"] = A is B
layer.uninstall(); layer.uninstall()
report["after_uninstall"] = sorted(k for k in sys.modules if k.startswith("megatron.core.datasets."))
report["finders_after"] = sum(type(f).__name__ == "Redirect" for f in sys.meta_path)
print(json.dumps(report))
"""


def _check_report(report: dict) -> None:
    assert report["finders"] == 1
    for short in MODULES:
        assert report[short] == f"tokenloom.megatron.datasets.{short}"
    assert report["same_class"] is True
    assert report["finders_after"] == 0


@pytest.mark.processes
def test_without_megatron_core_every_module_resolves_and_uninstall_undoes_it():
    report = run_json(CHECK_MODULES, with_megatron=False)
    _check_report(report)
    assert report["after_uninstall"] == []  # the placeholder packages are gone too


@pytest.mark.megatron
def test_with_megatron_core_the_rest_of_megatron_keeps_working():
    require_megatron()
    report = run_json(CHECK_MODULES)
    _check_report(report)
    others = run_json(
        r"""
import json, tokenloom.megatron
tokenloom.megatron.install()
import megatron.core, megatron.core.parallel_state as ps, megatron.core.tokenizers as tk
import megatron.core.datasets.bert_dataset as bert, megatron.core.datasets.masked_dataset as masked
import megatron.core.datasets.megatron_dataset as md
print(json.dumps({
    "parallel_state": ps.__file__, "tokenizers": tk.__file__, "bert": bert.__file__,
    "bert_base_is_ours": issubclass(masked.MaskedWordPieceDataset, md.MegatronDataset)
        and md.MegatronDataset.__module__.startswith("tokenloom"),
}))
"""
    )
    assert (
        ".megatron-core" in others["parallel_state"] or "megatron/core" in others["parallel_state"]
    )
    assert others["bert"].endswith("megatron/core/datasets/bert_dataset.py")
    assert others["bert_base_is_ours"] is True


@pytest.mark.megatron
def test_modules_imported_before_install_are_replaced_with_a_warning():
    require_megatron()
    done = run_python(
        r"""
import logging, sys
logging.basicConfig(level=logging.WARNING)
import megatron.core.datasets.utils as before
import tokenloom.megatron
tokenloom.megatron.install()
import megatron.core.datasets.utils as after
assert after.__name__ == "tokenloom.megatron.datasets.utils", after
tokenloom.megatron.uninstall()
import megatron.core.datasets.utils as again
assert again is before, (again, before)
print("ok")
"""
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "were imported before install()" in done.stderr
    assert "megatron.core.datasets.utils" in done.stderr


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "train_script.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.mark.processes
def test_the_launcher_runs_an_unmodified_script_with_its_arguments(tmp_path):
    script = _script(
        tmp_path,
        """
        import sys
        from megatron.core.datasets.utils import Split, compile_helpers
        compile_helpers()
        assert __name__ == "__main__"
        print("argv", sys.argv[1:], Split.valid.value, sys.path[0] == __file__.rsplit("/", 1)[0])
        """,
    )
    done = subprocess.run(
        [sys.executable, "-m", "tokenloom.megatron", script, "--data-path", "x y"],
        env=megatron_env(with_megatron=False),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "argv ['--data-path', 'x y'] 1 True" in done.stdout


@pytest.mark.processes
def test_the_launcher_runs_a_module_and_explains_itself(tmp_path):
    (tmp_path / "trainer_module.py").write_text(
        "import sys\nfrom megatron.core.datasets import helpers\nprint('module', sys.argv[1:])\n"
    )
    env = megatron_env(with_megatron=False)
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    done = subprocess.run(
        [sys.executable, "-m", "tokenloom.megatron", "-m", "trainer_module", "--x", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "module ['--x', '1']" in done.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "tokenloom.megatron"], capture_output=True, text=True, timeout=120
    )
    assert usage.returncode == 2 and "torchrun" in usage.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "tokenloom.megatron", str(tmp_path / "nope.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "no such script" in missing.stderr


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_the_launcher_under_torchruns_environment_on_two_ranks(tmp_path):
    """What ``torchrun --nproc-per-node 2 -m tokenloom.megatron SCRIPT`` starts: the same
    command on every rank with RANK/LOCAL_RANK/WORLD_SIZE set (torchrun itself is not run:
    its rendezvous store listens on every interface; a file rendezvous stays local)."""
    script = _script(
        tmp_path,
        """
        import os, torch.distributed as dist
        from megatron.core.datasets.blended_megatron_dataset_builder import (
            BlendedMegatronDatasetBuilder,
        )
        dist.init_process_group(
            "gloo", init_method=os.environ["INIT_METHOD"],
            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
        )
        dist.barrier()
        print("rank", dist.get_rank(), "of", dist.get_world_size(),
              BlendedMegatronDatasetBuilder.__module__)
        dist.destroy_process_group()
        """,
    )
    procs = []
    for rank in range(2):
        env = megatron_env(with_megatron=False)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="2",
            INIT_METHOD=f"file://{tmp_path}/rendezvous",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tokenloom.megatron", script],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        outputs = [proc.communicate(timeout=540) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for rank, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, err[-3000:]
        assert (
            f"rank {rank} of 2 tokenloom.megatron.datasets.blended_megatron_dataset_builder" in out
        )


SUBCLASS_MODULE = """
import numpy
from megatron.core.datasets.gpt_dataset import MockGPTDataset

class Reversed(MockGPTDataset):
    def _query_document_sample_shuffle_indices(self, idx):
        tokens, documents = super()._query_document_sample_shuffle_indices(idx)
        return numpy.ascontiguousarray(tokens[::-1]), documents
"""

PICKLE_IT = r"""
import json, pickle, sys
import tokenloom.megatron
tokenloom.megatron.install()
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
from subclass_module import Reversed
config = GPTDatasetConfig(random_seed=3, sequence_length=16, split="90,5,5",
    reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
    tokenizer={"vocab_size": 500, "eod": 0})
train = BlendedMegatronDatasetBuilder(Reversed, [20, 2, 2], lambda: True, config).build()[0]
with open(sys.argv[1], "wb") as handle:
    pickle.dump(train, handle)
print(json.dumps(train[3]["tokens"].tolist()))
"""

UNPICKLE_IT = r"""
import json, pickle, sys
with open(sys.argv[1], "rb") as handle:
    train = pickle.load(handle)
import megatron.core.datasets.gpt_dataset as gpt
print(json.dumps({"module": gpt.__name__, "mro": [c.__module__ for c in type(train).__mro__],
                  "tokens": train[3]["tokens"].tolist(), "type": str(type(train[3]["tokens"]))}))
"""


@pytest.mark.megatron
def test_a_dataset_pickled_under_the_layer_unpickles_under_it_in_a_fresh_process(tmp_path):
    """A spawned DataLoader worker has not called install(): the pickle calls it first,
    so a Megatron-LM subclass of the compat GPTDataset keeps tokenloom's base there."""
    require_megatron()
    (tmp_path / "subclass_module.py").write_text(SUBCLASS_MODULE)
    env = {"PYTHONPATH": f"{tmp_path}:{megatron_env()['PYTHONPATH']}"}
    path = str(tmp_path / "train.pickle")
    expected = run_json(PICKLE_IT, path, env=env)
    fresh = run_json(UNPICKLE_IT, path, env=env)
    assert fresh["tokens"] == expected
    assert fresh["module"] == "tokenloom.megatron.datasets.gpt_dataset"
    assert "tokenloom.datasets.gpt" in fresh["mro"]
    assert fresh["type"] == "<class 'torch.Tensor'>"
