"""``IndexedDataset`` over ``s3://`` / ``msc://`` prefixes: the seam to :mod:`tokenloom.storage`.

The ``.idx`` is fetched into the local cache (reused when its ETag and size match) and
mapped like a local one; the ``.bin`` is read by ranges through
:class:`tokenloom.storage.ObjectBinReader`.  The identity of a remote pair is the
digest and size of the ``.idx`` plus the size and ETag of the ``.bin`` (no mtimes: a
copy downloaded on another node must give the same identity).

:mod:`tokenloom.storage` (ranked below format, see docs/architecture.md) is imported
only when a remote prefix is opened, so ``import tokenloom.format`` and local pairs
never load it; :func:`is_remote` answers without it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Optional, Union, cast

from tokenloom.errors import FormatError
from tokenloom.format.bin_readers import BinReader
from tokenloom.format.identity import DIGEST_NAME
from tokenloom.format.index_file import IndexFile
from tokenloom.format.spec import get_bin_path, get_idx_path

#: the prefixes of object storage, as ``tokenloom.storage.urls.REMOTE_PREFIXES`` (a test
#: checks they agree): known here so that a local path never imports storage
REMOTE_PREFIXES = ("s3://", "msc://")

__all__ = [
    "is_remote",
    "open_remote",
    "remote_identity",
    "remote_exists",
    "fetched_index",
    "index_and_bin_size",
]


def is_remote(path: Union[str, os.PathLike[str]]) -> bool:
    """True for ``s3://...`` and ``msc://...`` paths (Megatron's ``is_object_storage_path``)."""
    return isinstance(path, str) and path.startswith(REMOTE_PREFIXES)


def open_remote(
    path_prefix: str,
    multimodal: bool,
    mmap: bool,
    config: Any,
    sequences_per_dataset: Any,
    dtype_code: Optional[int],
    check_documents: bool,
) -> tuple[IndexFile, BinReader]:
    """The mapped cached ``.idx`` and the ``.bin`` reader of a remote pair."""
    from tokenloom.storage import ObjectBinReader, open_remote_pair

    BinReader.register(ObjectBinReader)  # it implements the interface (storage is below format)
    local_idx, reader = open_remote_pair(path_prefix, config, mmap)
    try:
        index = IndexFile(
            local_idx,
            multimodal,
            sequences_per_dataset,
            dtype_code,
            check_documents=check_documents,
        )
    except FormatError as error:
        reader.close()
        raise FormatError(f"{path_prefix}.idx (cached at {local_idx}): {error}") from error
    except BaseException:
        reader.close()
        raise
    return index, cast(BinReader, reader)


def remote_identity(
    index: Optional[IndexFile], reader: Any
) -> Optional[OrderedDict[str, OrderedDict[str, object]]]:
    """``{"idx": {size, digest}, "bin": {size, etag}}`` of an open remote pair."""
    from tokenloom.storage import ObjectBinReader

    if index is None or index.stat is None or not isinstance(reader, ObjectBinReader):
        return None
    digest = index.digest()
    if digest is None:
        return None
    idx: OrderedDict[str, object] = OrderedDict(
        [("size", index.stat.st_size), (DIGEST_NAME, digest)]
    )
    bin_: OrderedDict[str, object] = OrderedDict([("size", reader.size), ("etag", reader.etag)])
    return OrderedDict([("idx", idx), ("bin", bin_)])


def remote_exists(path_prefix: str) -> bool:
    """Whether both objects of a remote pair exist."""
    from tokenloom.storage import dataset_exists

    return dataset_exists(path_prefix)


def fetched_index(path_prefix: str, config: Any = None) -> str:
    """The local copy of a remote pair's ``.idx`` (fetched unless fresh), for
    ``tokenloom inspect``; without a config the default cache folder is used."""
    from tokenloom.storage import config_or_default, fetch_index

    return fetch_index(path_prefix + ".idx", config_or_default(config))


def index_and_bin_size(dataset: Any) -> tuple[str, int]:
    """``(path of the .idx file read, size of the .bin)`` of an open local or remote pair."""
    prefix = dataset.path_prefix
    if is_remote(prefix):
        from tokenloom.storage import config_or_default, index_cache_path, open_object, parse_url

        config = config_or_default(dataset.object_storage_config)
        size = dataset.bin_reader.size
        if size is None:  # a client that tells no size: the object is read through
            size = open_object(parse_url(get_bin_path(prefix)), config).head().size
        return index_cache_path(prefix + ".idx", config.path_to_idx_cache), int(size)
    return get_idx_path(prefix), os.path.getsize(get_bin_path(prefix))
