import numpy
import pytest
from tests.storage.storage_helpers import storage_config

from tokenloom.format import IndexedDataset

pytestmark = pytest.mark.s3


def test_every_document_equals_local_s3_and_msc(s3, tmp_path):
    from tokenloom.storage import open_remote_dataset

    local = IndexedDataset(s3.local["small"])
    for url in (s3.remote["small"], s3.msc("small")):
        idx, reader = open_remote_dataset(url, storage_config(tmp_path, bin_chunk_nbytes=4096))
        assert reader.size == local.bin_reader.size
        for i in range(len(local)):
            p, n = int(local.sequence_pointers[i]), int(local.sequence_lengths[i])
            numpy.testing.assert_array_equal(reader.read(local.dtype, n, p), local[i])
