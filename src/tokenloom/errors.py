"""The one error hierarchy of tokenloom.

Every error raised on bad input derives from :class:`TokenloomError` and from the
builtin that best describes it, so ``except ValueError`` keeps working for callers
that do not know tokenloom.  Messages name the file, the field and the value, and
say how to fix the problem where that is known.
"""

from __future__ import annotations


class TokenloomError(Exception):
    """Base class of every error tokenloom raises on purpose."""


class FormatError(TokenloomError, ValueError):
    """A ``.bin``/``.idx`` pair (or data handed to the writer) breaks the MMIDIDX format."""


class ConfigError(TokenloomError, ValueError):
    """A dataset config or command-line argument cannot be satisfied."""


class CacheError(TokenloomError, OSError):
    """An index cache file is missing, corrupt or does not match its description."""


class PreprocessError(TokenloomError, ValueError):
    """Input to ``tokenloom preprocess`` is malformed (bad JSON, missing key, ...)."""


class TokenizerError(TokenloomError, ValueError):
    """A tokenizer could not be loaded or used."""


class DistributedError(TokenloomError, RuntimeError):
    """A distributed build could not complete (e.g. rank 0 failed, cache missing on a node)."""


__all__ = [
    "TokenloomError",
    "FormatError",
    "ConfigError",
    "CacheError",
    "PreprocessError",
    "TokenizerError",
    "DistributedError",
]


class PackingError(TokenloomError, ValueError):
    """Sequences cannot be packed or scheduled over the DP x CP ranks as asked."""


__all__.append("PackingError")


class PublishTimeoutError(TokenloomError, TimeoutError):
    """Another process held the publish lock of a ``.bin``/``.idx`` pair for too long."""


__all__ += ["PublishTimeoutError"]


class StorageError(TokenloomError, OSError):
    """An object-storage request (s3://, msc://) failed, after its retries where retryable."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """An object-storage object, bucket or MSC profile does not exist."""


class StorageAccessError(StorageError, PermissionError):
    """Object storage refused the request: bad credentials or no permission (403)."""


__all__ += ["StorageError", "ObjectNotFoundError", "StorageAccessError"]


class OutputError(TokenloomError, OSError):
    """An output file could not be written (disk full, quota, I/O error); names the file."""


__all__ += ["OutputError"]


class SampleIndexError(TokenloomError, IndexError):
    """A sample index outside a dataset (``dataset[i]``, ``get_batch``); names the index
    and the dataset's length. An IndexError, so iteration by ``__getitem__`` still stops."""


__all__ += ["SampleIndexError"]


class UntrustedFileError(TokenloomError, ValueError):
    """A JSON file read from disk (sidecar, cache header, memo, ``--config``, marker,
    loader state, ...) is too large, nests too deeply, is not a regular file or is not
    JSON. Names the file, what it is and the limit broken (``tokenloom.untrusted_json``).
    """

    def __init__(self, message: str, *, path: str = "", what: str = "", problem: str = ""):
        super().__init__(message)
        #: the file (or ``file:line``) that was refused
        self.path = path
        #: what the file is, e.g. ``"provenance sidecar"``
        self.what = what
        #: what is wrong with it, e.g. ``"is larger than the limit of 16777216 bytes"``
        self.problem = problem

    def __reduce__(self) -> tuple[object, tuple[str, str, str, str]]:
        return (_rebuild_untrusted, (str(self), self.path, self.what, self.problem))


def _rebuild_untrusted(message: str, path: str, what: str, problem: str) -> UntrustedFileError:
    return UntrustedFileError(message, path=path, what=what, problem=problem)


__all__ += ["UntrustedFileError"]
