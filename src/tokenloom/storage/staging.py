"""Write outputs locally first, then upload: ``tokenloom preprocess --output-prefix s3://...``.

:func:`staged_output` hands out a local prefix in a fresh staging folder (under
``$TOKENLOOM_STAGING_DIR``, else the system temporary folder).  The writer finalizes
its pairs there atomically; only when the block exits without an error is every pair
uploaded (each ``.bin`` before its ``.idx``, then the sidecars; S3 and MSC show an
object only once its upload completed, so no partial object is ever visible).  Only
the pairs, their sidecars and other visible files are uploaded: a finished publish
leaves no lock or journal behind, and hidden bookkeeping is never uploaded, so the
bucket holds nothing else.  The folder is removed in every case.  For a local prefix it hands out the prefix itself and does nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from tokenloom.storage.datasets import config_or_default, upload_dataset
from tokenloom.storage.open import open_object
from tokenloom.storage.urls import is_remote, parse_url

logger = logging.getLogger("tokenloom.storage")

_ENV_STAGING = "TOKENLOOM_STAGING_DIR"


@contextlib.contextmanager
def staged_output(output_prefix: str, config: Any = None) -> Iterator[str]:
    """The local prefix to write to; remote outputs are uploaded when the block succeeds."""
    if not is_remote(output_prefix):
        yield output_prefix
        return
    url = parse_url(output_prefix, for_writing=True)  # a malformed URL fails before work
    parent = os.environ.get(_ENV_STAGING) or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="tokenloom-staging-", dir=parent)
    name = url.key.rsplit("/", 1)[-1]
    try:
        yield os.path.join(folder, name)
        _upload_folder(folder, output_prefix[: -len(name)], config)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _uploaded_files(entries: list[str], pairs: list[str]) -> list[str]:
    """The files of the staging folder to upload besides the pairs: each pair's sidecars
    (``PAIR.json``, ...) and any other visible file.  Hidden bookkeeping (a publish lock
    or journal, ``.NAME.*.tmp`` temporaries) never becomes an object."""
    done = {p + suffix for p in pairs for suffix in (".bin", ".idx")}
    return [
        entry
        for entry in entries
        if entry not in done
        and (not entry.startswith(".") or any(entry.startswith(p + ".") for p in pairs))
    ]


def _upload_folder(folder: str, remote_dir: str, config: Any) -> None:
    """Every pair of ``folder`` (``.bin`` first, ``.idx`` last), then its sidecars and
    the other visible files, to ``remote_dir``."""
    entries = sorted(os.listdir(folder))
    pairs = [entry[:-4] for entry in entries if entry.endswith(".idx")]
    for local_name in pairs:
        upload_dataset(os.path.join(folder, local_name), remote_dir + local_name, config)
    storage_config = config_or_default(config)
    for entry in _uploaded_files(entries, pairs):
        path = os.path.join(folder, entry)
        if os.path.isfile(path):
            open_object(parse_url(remote_dir + entry), storage_config).upload(path)
    logger.info("uploaded %d dataset(s) to %s", len(pairs), remote_dir)


__all__ = ["staged_output"]
