"""tokenloom.cache: a content-addressed, atomic, validated cache of index arrays.

Datasets (``GPTDataset``, ``BlendedDataset``) cache the index arrays they build in a
directory ``path_to_cache``::

    <hash>-<Class>-<split>-indices.cache    one entry: a JSON header (what the arrays
                                            were built from, plus dtype/shape/size/CRC32
                                            of each array), then the arrays, 64-byte
                                            aligned (:mod:`tokenloom.cache.entry`)
    packs/<id>-pack.cache                   many small entries, byte for byte, behind a
                                            CRC-checked table (:mod:`tokenloom.cache.pack`)

``<hash>`` is the MD5 of the key's description (:mod:`tokenloom.cache.keys`), which
holds EVERY input that shapes the arrays, so a cache is reused only when nothing
changed. :class:`IndexCache` (:mod:`tokenloom.cache.store`) looks entries up, validates
and stores them; an :class:`EntryPacker` handed to it collects small entries into one
pack file.
"""

from tokenloom.cache.entry import CACHE_FORMAT
from tokenloom.cache.keys import CacheKey, array_digest, describe, description_hash, json_scalar
from tokenloom.cache.pack import EntryPacker
from tokenloom.cache.store import ENTRY_SUFFIX, IndexCache, LazyArrays
from tokenloom.format.identity import file_identity

__all__ = [
    "CACHE_FORMAT",
    "ENTRY_SUFFIX",
    "CacheKey",
    "EntryPacker",
    "IndexCache",
    "LazyArrays",
    "array_digest",
    "describe",
    "description_hash",
    "file_identity",
    "json_scalar",
]
