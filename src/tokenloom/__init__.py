"""tokenloom: Megatron-compatible LLM data pipeline without Megatron."""

__version__ = "0.1.0"

from tokenloom.errors import (
    CacheError,
    ConfigError,
    DistributedError,
    FormatError,
    PreprocessError,
    TokenizerError,
    TokenloomError,
)

__all__ = [
    "__version__",
    "CacheError",
    "ConfigError",
    "DistributedError",
    "FormatError",
    "PreprocessError",
    "TokenizerError",
    "TokenloomError",
]
