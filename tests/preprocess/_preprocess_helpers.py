"""JSONL writers shared by the preprocess tests."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path


def compress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.compress(data)
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    if compression == "bzip2":
        return bz2.compress(data)
    if compression == "xz":
        return lzma.compress(data)
    return data


def write_jsonl(path: Path, records, compression: str = "none") -> Path:
    """Write records (dicts, or raw str lines written as they are) as JSONL."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(compress(data, compression))
    return path


class PlainTokenizer:
    """Only the tokenizer protocol (encode_batch to lists, no flat or deferred forms): bytes."""

    vocab_size, eod, pad, unique_identifiers = 257, 256, None, {"class": "PlainTokenizer"}

    def encode_batch(self, texts):
        return [list(text.encode("utf-8")) for text in texts]
