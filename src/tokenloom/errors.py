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
