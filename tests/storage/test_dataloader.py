"""torch DataLoader workers (fork and spawn) reading an s3:// dataset: each worker gets
its own client and reads the right tokens."""

from __future__ import annotations

import numpy
import pytest
from tests.storage.storage_helpers import storage_config

pytestmark = pytest.mark.s3


class Documents:
    """A map-style dataset of an IndexedDataset's documents (picklable for spawn)."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        import os

        return numpy.asarray(self.dataset[i], dtype=numpy.int64), os.getpid()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_read_from_s3(s3, tmp_path, context):
    torch = pytest.importorskip("torch")
    from tokenloom.format import IndexedDataset

    local = IndexedDataset(s3.local["small"])
    remote = IndexedDataset(
        s3.remote["small"],
        mmap=False,
        object_storage_config=storage_config(tmp_path, bin_chunk_nbytes=4096),
    )
    remote[0]  # the parent has a client and a cached block before the workers start
    loader = torch.utils.data.DataLoader(
        Documents(remote),
        batch_size=None,
        num_workers=2,
        multiprocessing_context=context,
        shuffle=False,
    )
    pids = set()
    for i, (tokens, pid) in enumerate(loader):
        numpy.testing.assert_array_equal(tokens.numpy(), local[i].astype(numpy.int64))
        pids.add(int(pid))
    assert i == len(local) - 1 and len(pids) == 2
