"""tiktoken encodings: a local ``.tiktoken`` BPE file, or a built-in encoding cached offline.

A ``.tiktoken`` file holds only the mergeable ranks (``base64(token) rank`` per line);
the split pattern and special tokens come from:

* the file name, when it is a tiktoken encoding name (``cl100k_base.tiktoken``): that
  encoding's pattern, special tokens and vocabulary size;
* otherwise ``pattern`` (an encoding name whose pattern to borrow, or a regex;
  default: the GPT-2 pattern) and one special token ``<|endoftext|>`` (or the text
  given as ``eod``) placed right after the last rank.

The file is parsed here rather than with ``tiktoken.load.load_tiktoken_bpe``, which
copies local files into a cache keyed by their path and would keep serving the old
ranks after the file changes.  Built-in names (``cl100k_base``) load through
``tiktoken.get_encoding`` only when tiktoken's cache already holds them: tokenloom
never downloads at run time and says how to provide the file instead.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Sequence
from typing import Optional, Union

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.base import ID_DTYPE, BaseTokenizer, check_model_file, file_sha256

ENDOFTEXT = "<|endoftext|>"
# GPT-2's split pattern (as tiktoken writes it); used when nothing else is known
GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++"""
    r"""|\s++$|\s+(?!\S)|\s"""
)


def _import_tiktoken():
    try:
        import tiktoken
    except ImportError as error:
        raise TokenizerError(
            "tiktoken encodings need the 'tiktoken' package: pip install 'tokenloom[tokenizers]'"
        ) from error
    return tiktoken


def read_tiktoken_ranks(path: str) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file: one ``base64(token) rank`` pair per line."""
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except ValueError as error:
                raise TokenizerError(
                    f"{path}:{number}: not a '.tiktoken' line (expected "
                    f"'<base64 token> <rank>'): {line[:60]!r}"
                ) from error
    if not ranks:
        raise TokenizerError(f"{path}: the .tiktoken file holds no ranks")
    return ranks


@contextlib.contextmanager
def _replaced(module, name: str, value):
    original = read_attribute(module, name, None)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def named_encoding_params(name: str, ranks: dict[bytes, int]) -> Optional[dict]:
    """The constructor parameters of tiktoken encoding ``name`` with ``ranks`` as its ranks.

    Returns None when ``name`` is not a known encoding.  No file is read or fetched.
    """
    tiktoken = _import_tiktoken()
    if name not in tiktoken.list_encoding_names():
        return None
    try:
        import tiktoken_ext.openai_public as public
    except ImportError:
        return None
    constructor = read_attribute(public, name, None)
    if not callable(constructor):
        return None
    with (
        _replaced(public, "load_tiktoken_bpe", lambda *a, **k: ranks),
        _replaced(public, "data_gym_to_mergeable_bpe_ranks", lambda *a, **k: ranks),
    ):
        return constructor()


def _offline_read(blobpath: str) -> bytes:
    if "://" in blobpath:
        raise TokenizerError(f"not cached offline: {blobpath}")
    with open(blobpath, "rb") as handle:
        return handle.read()


def load_builtin_encoding(name: str):
    """``tiktoken.get_encoding(name)`` from tiktoken's cache only, never the network."""
    _import_tiktoken()
    import tiktoken.load

    try:
        with _replaced(tiktoken.load, "read_file", _offline_read):
            return tiktoken.get_encoding(name)
    except TokenizerError as error:
        raise TokenizerError(
            f"tiktoken encoding {name!r} is not in tiktoken's cache (TIKTOKEN_CACHE_DIR) and "
            f"tokenloom does not download at run time ({error}); copy {name}.tiktoken to this "
            f"machine and pass --tokenizer tiktoken:/path/to/{name}.tiktoken"
        ) from None
    except ValueError as error:
        raise TokenizerError(f"unknown tiktoken encoding {name!r}: {error}") from error


class TiktokenTokenizer(BaseTokenizer):
    """A tiktoken ``Encoding`` (see the module docstring for how it is assembled).

    Args:
        source: path of a ``.tiktoken`` file, or a built-in encoding name.
        pattern: for files with a non-standard name: an encoding name or a split regex.
        eod: end-of-document special token text or id (default ``<|endoftext|>``).
        num_threads: threads of ``encode_ordinary_batch``; with 1 (the default, as
            preprocess workers supply the parallelism) ``encode_ordinary`` is called per
            text directly, which is the same work without the thread pool.
    """

    def __init__(
        self,
        source: str,
        pattern: Optional[str] = None,
        eod: Union[str, int, None] = None,
        num_threads: int = 1,
    ) -> None:
        tiktoken = _import_tiktoken()
        self.num_threads = max(int(num_threads), 1)
        source = os.fspath(source)
        if os.path.sep in source or source.endswith(".tiktoken") or os.path.exists(source):
            self.path: Optional[str] = check_model_file(
                source, "tiktoken", "pass a .tiktoken file or a built-in encoding name"
            )
            self._encoding = self._from_file(tiktoken, self.path, pattern, eod)
            digest = file_sha256(self.path)
        else:
            self.path, digest = None, None
            self._encoding = load_builtin_encoding(source)
        self.vocab_size = int(self._encoding.n_vocab)
        self.eod = self._resolve_eod(eod)
        self.pad = None
        self._finish_init(
            {"source": source, "pattern": pattern, "eod": eod, "num_threads": num_threads},
            {
                "class": type(self).__name__,
                "tokenizer_path": [self.path] if self.path else [],
                "encoding": self._encoding.name,
                "sha256": digest,
                "pattern": read_attribute(self._encoding, "_pat_str", None),
            },
        )

    @staticmethod
    def _from_file(tiktoken, path: str, pattern: Optional[str], eod):
        ranks = read_tiktoken_ranks(path)
        stem = os.path.basename(path)[: -len(".tiktoken")] if path.endswith(".tiktoken") else ""
        params = named_encoding_params(stem, ranks) if stem and pattern is None else None
        if params is None:
            borrowed = named_encoding_params(pattern, ranks) if pattern else None
            eod_text = eod if isinstance(eod, str) and not eod.isdigit() else ENDOFTEXT
            params = {
                "name": stem or os.path.basename(path),
                "mergeable_ranks": ranks,
                "pat_str": borrowed["pat_str"] if borrowed else (pattern or GPT2_PATTERN),
                "special_tokens": {eod_text: max(ranks.values()) + 1},
            }
        try:
            return tiktoken.Encoding(**params)
        except Exception as error:  # bad regex, inconsistent vocabulary, ...
            raise TokenizerError(f"{path}: cannot build a tiktoken encoding: {error}") from error

    def _resolve_eod(self, eod) -> Optional[int]:
        specials = self._encoding.special_tokens_set
        if eod is None:
            return self._encoding.encode_single_token(ENDOFTEXT) if ENDOFTEXT in specials else None
        if isinstance(eod, int) or str(eod).isdigit():
            value = int(eod)
            if not 0 <= value < self.vocab_size:
                raise TokenizerError(
                    f"tiktoken {self._encoding.name}: eod id {value} is outside "
                    f"0..{self.vocab_size - 1}"
                )
            return value
        if eod not in specials:
            raise TokenizerError(
                f"tiktoken {self._encoding.name}: eod {eod!r} is not one of its "
                f"special tokens {sorted(specials)}"
            )
        return self._encoding.encode_single_token(eod)

    def _encode_native(self, texts: list[str]) -> list:
        """One thread: ``encode_to_numpy`` per text (ordinary encoding, no Python int lists)."""
        encode = read_attribute(self._encoding, "encode_to_numpy", None)
        if self.num_threads != 1 or encode is None:
            return super()._encode_native(texts)
        # no allowed and no disallowed special tokens: exactly encode_ordinary's result
        return [encode(text, disallowed_special=()) for text in texts]

    def _flat_from_native(self, native: list) -> tuple[numpy.ndarray, numpy.ndarray]:
        if not native or not isinstance(native[0], numpy.ndarray):
            return super()._flat_from_native(native)
        lengths = numpy.fromiter(map(len, native), dtype=numpy.int64, count=len(native))
        return numpy.concatenate(native).view(ID_DTYPE), lengths  # ids < 2**31: same bits

    def _encode_lists(self, texts: Sequence[str]) -> list[list[int]]:
        if self.num_threads == 1:  # the batch call's thread pool would only add hand-offs
            encode = self._encoding.encode_ordinary
            return [encode(text) for text in texts]
        return self._encoding.encode_ordinary_batch(list(texts), num_threads=self.num_threads)

    def decode(self, ids) -> str:
        """Text of ``ids`` (special tokens shown as their text; bad UTF-8 as U+FFFD)."""
        try:
            return self._encoding.decode(self._id_list(ids))
        except (KeyError, ValueError) as error:
            raise TokenizerError(
                f"tiktoken {self._encoding.name}: cannot decode: {error}"
            ) from error

    @property
    def backend(self):
        """The underlying ``tiktoken.Encoding``."""
        return self._encoding


__all__ = [
    "TiktokenTokenizer",
    "read_tiktoken_ranks",
    "named_encoding_params",
    "load_builtin_encoding",
    "GPT2_PATTERN",
    "ENDOFTEXT",
]
