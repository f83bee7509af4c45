"""Dataset configs with megatron-core 0.16.1's field names, validated on construction.

``BlendedMegatronDatasetConfig`` parameterises the builder and every dataset;
``GPTDatasetConfig`` adds the GPT sample options. Field names, defaults and the
derived fields (``split_matrix``, ``mock``, ``token_dtype_code``) are Megatron's, so
migrating is a change of imports. Unlike Megatron, every rule is checked in
``__post_init__`` and broken ones raise :class:`~tokenloom.errors.ConfigError` saying
which field to change (Megatron asserts, or hangs, or fails much later).

The tokenizer may be any object with ``vocab_size`` and ``eod`` (optionally ``pad``
and ``unique_identifiers``) or a mapping such as ``{"vocab_size": 32000, "eod": 2}``,
which becomes a :class:`SimpleTokenizer`.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from tokenloom.attributes import read_attribute
from tokenloom.datasets import _checks as checks
from tokenloom.datasets.repetition import check_cap
from tokenloom.datasets.schedule import check_blend_schedule
from tokenloom.datasets.split import (
    Split,
    convert_split_vector_to_split_matrix,
    parse_and_normalize_split,
)
from tokenloom.datasets.utils import get_blend_from_list, load_sequences_per_dataset
from tokenloom.errors import ConfigError

MAX_SEQUENCE_LENGTH = 2**31 - 1
"""The longest ``sequence_length``: megatron-core's index helpers take it as an int32."""

MAX_MID_LEVEL_DATASET_SURPLUS = 1e6
"""The largest ``mid_level_dataset_surplus``: beyond it the per-dataset sample counts
(``ceil(size * weight * (1 + surplus))``) stop being buildable arrays."""

__all__ = [
    "MAX_MID_LEVEL_DATASET_SURPLUS",
    "MAX_SEQUENCE_LENGTH",
    "BlendedMegatronDatasetConfig",
    "GPTDatasetConfig",
    "SimpleTokenizer",
    "parse_and_normalize_split",
    "convert_split_vector_to_split_matrix",
    "get_blend_from_list",
]


@dataclass(frozen=True)
class SimpleTokenizer:
    """The special-token facts the GPT datasets need, when no real tokenizer is at hand."""

    vocab_size: Optional[int]
    """Number of token ids (``None`` if unknown; then ``token_dtype_code`` is ``None``)."""

    eod: int
    """The end-of-document token id."""

    pad: Optional[int] = None
    """The pad token id, or ``None`` for no pad token (samples are then padded with -1)."""

    @property
    def unique_identifiers(self) -> OrderedDict[str, object]:
        """What identifies this tokenizer in a cache description."""
        return OrderedDict(
            [
                ("class", type(self).__name__),
                ("vocab_size", self.vocab_size),
                ("eod", self.eod),
                ("pad", self.pad),
            ]
        )


@dataclass
class BlendedMegatronDatasetConfig:
    """Configuration of the builder and of every Megatron-style dataset."""

    random_seed: int
    """The seed for all RNG during dataset creation: an integer in ``[0, 2**32 - 1]``,
    the range of numpy's ``RandomState`` (megatron-core fails on others)."""

    sequence_length: int
    """The sequence length: tokens per sample, an integer in ``[1, 2**31 - 1]`` (int32,
    as megatron-core's index helpers take it)."""

    blend: Optional[tuple[list[str], Optional[list[float]]]] = None
    """``(prefixes, weights or None)``, e.g. ``(["a", "b"], [0.3, 0.7])``. Without weights
    they are inferred from dataset lengths. Not with ``blend_per_split``."""

    blend_per_split: Optional[list[Optional[tuple[list[str], Optional[list[float]]]]]] = None
    """One blend (or ``None``) per split, train/valid/test. Not with ``blend``/``split``."""

    multiple_validation_sets: Optional[bool] = None
    """Treat each validation prefix of ``blend_per_split`` as a separate dataset."""

    full_validation: Optional[bool] = None
    """Run a full epoch of validation each time validation occurs."""

    split: Optional[str] = None
    """Comma separated split weights such as ``"98,2,0"`` (needed with ``blend``)."""

    split_matrix: Optional[list[Optional[tuple[float, float]]]] = field(init=False, default=None)
    """Derived from ``split``: per split ``(begin, end)`` fractions or ``None``."""

    num_dataset_builder_threads: int = 1
    """Threads used to build the datasets of a blend (an integer >= 1; any value above
    the number of prefixes means one thread per prefix)."""

    path_to_cache: Optional[str] = None
    """Directory of the index cache. ``None``: ``<prefix>/cache/<Class>_indices``."""

    mmap_bin_files: bool = True
    """mmap the ``.bin`` files (True) or read them with file pointers (False).

    With True, a ``.bin`` truncated in place under a running job is a ``FormatError``
    naming it at open, in new DataLoader workers and on reads of its last 64 KiB; any
    other read of it dies of SIGBUS, after one stderr line naming the file (Linux
    x86_64/aarch64: ``tokenloom.format.sigbus``, nothing on the read path, ~10 us per
    mapping opened and closed, compiled once per process in the background;
    ``TOKENLOOM_SIGBUS_HANDLER=0`` turns it off; docs/reliability.md). With False
    nothing crashes: a short read is a ``FormatError``, at the cost of a copy per read."""

    mock: bool = field(init=False, default=False)
    """Derived: True when neither ``blend`` nor ``blend_per_split`` gives data."""

    tokenizer: Optional[object] = None
    """The tokenizer (``vocab_size``, ``eod``, optional ``pad``/``unique_identifiers``)."""

    mid_level_dataset_surplus: float = 0.005
    """Extra fraction of samples built per mid-level dataset of a weighted blend: a
    finite number in ``[0, 1e6]`` (0: exactly the samples the blend draws; negative
    values, NaN and infinities are refused)."""

    allow_ambiguous_pad_tokens: Optional[bool] = False
    """Keep masking the tokenizer's pad id even when it equals another special token."""

    fast_cache_load: bool = False
    """Assume every index cache exists: skip existence checks and rank synchronisation."""

    defer_npy_index_mmap: bool = False
    """mmap cached indices at first access; ``len()`` is computed arithmetically."""

    build_on_all_ranks: bool = field(default=True, kw_only=True)
    """tokenloom extension: each rank builds a share of every blend's prefixes (balanced
    by estimated cost, largest first, in ``num_dataset_builder_threads`` threads) into
    ``path_to_cache``, then loads the others'; only when every rank sees rank 0's
    ``path_to_cache`` (a token file checks it). Otherwise, and with False, rank 0 builds
    and the others load (node-local caches: once per node). The same on every rank."""

    blend_schedule: Optional[list[tuple[Any, ...]]] = field(default=None, kw_only=True)
    """tokenloom extension: the train split's weights as a function of its sample index,
    ``[(start_sample, weights), ...]`` (one weight >= 0 per prefix of ``blend``,
    normalised; phase 0 starts at 0), a phase ``(start_sample, weights, "linear")``
    ramping from the previous phase's weights to its own at the next phase's start; the
    last phase holds. ``blend``'s weights then serve valid and test. In the cache key.
    Rules: :mod:`tokenloom.datasets.schedule`, docs/mixtures.md."""

    max_epochs_per_source: Optional[Union[float, list[float]]] = field(default=None, kw_only=True)
    """tokenloom extension: the most times a source's tokens may be served (a number > 0,
    or one per prefix of ``blend``); a build passing it is refused, naming the global
    sample where it passes (:mod:`tokenloom.datasets.repetition`, as ``tokenloom plan``)."""

    def __post_init__(self) -> None:
        """Validate every field and derive ``mock`` and ``split_matrix``."""
        checks.check_int("random_seed", self.random_seed, 0, 2**32 - 1)
        checks.check_int("sequence_length", self.sequence_length, 1, MAX_SEQUENCE_LENGTH)
        checks.check_int("num_dataset_builder_threads", self.num_dataset_builder_threads, 1)
        self._check_scalars()
        if self.path_to_cache is not None:
            self.path_to_cache = os.fspath(self.path_to_cache)
        if self.tokenizer is not None:
            self.tokenizer = checks.coerce_tokenizer(self.tokenizer, SimpleTokenizer)
        self._check_fast_paths()
        if self.blend_per_split is not None and any(self.blend_per_split):
            self._check_blend_per_split()
        else:
            self._check_blend_and_split()
        self.blend_schedule = check_blend_schedule(self)
        self.max_epochs_per_source = check_cap(
            self.max_epochs_per_source, self.blend and self.blend[0], "max_epochs_per_source"
        )

    def _check_scalars(self) -> None:
        checks.check_real(
            "mid_level_dataset_surplus",
            self.mid_level_dataset_surplus,
            0.0,
            MAX_MID_LEVEL_DATASET_SURPLUS,
            default="0.005",
        )
        for name in ("mmap_bin_files", "fast_cache_load", "defer_npy_index_mmap"):
            checks.check_bool(name, getattr(self, name))
        checks.check_bool("build_on_all_ranks", self.build_on_all_ranks)
        for name in ("multiple_validation_sets", "full_validation", "allow_ambiguous_pad_tokens"):
            checks.check_bool(name, getattr(self, name), allow_none=True)

    def _check_fast_paths(self) -> None:
        if self.fast_cache_load and self.path_to_cache is None:
            raise ConfigError(
                "fast_cache_load=True needs path_to_cache: set path_to_cache to the directory "
                "holding the prepared index cache (tokenloom prepare-cache) or disable it"
            )
        if self.fast_cache_load and self.blend is not None:
            raise ConfigError(
                "fast_cache_load=True cannot be used with blend; give the data as "
                "blend_per_split (one blend per train/valid/test) instead"
            )
        if self.defer_npy_index_mmap and self.path_to_cache is None:
            raise ConfigError(
                "defer_npy_index_mmap=True needs path_to_cache: set it to the directory "
                "holding the prepared index cache or disable defer_npy_index_mmap"
            )

    def _check_blend_per_split(self) -> None:
        blends = self.blend_per_split
        if blends is None:  # called only when blend_per_split is given
            return
        if self.blend is not None:
            raise ConfigError("blend and blend_per_split are incompatible; give only one")
        if self.split is not None:
            raise ConfigError(
                "split and blend_per_split are incompatible: each split already has its own "
                "blend; remove split"
            )
        if len(blends) != len(Split):
            raise ConfigError(
                f"blend_per_split has {len(blends)} entries; it needs exactly "
                f"{len(Split)} (train, valid, test), None for a split without data"
            )
        self.blend_per_split = [
            None if blend is None else checks.check_blend(f"blend_per_split[{split.name}]", blend)
            for split, blend in zip(Split, blends)
        ]

    def _check_blend_and_split(self) -> None:
        if self.blend is not None:
            self.blend = checks.check_blend("blend", self.blend)
            if self.split is None:
                raise ConfigError(
                    "split must be given with blend, e.g. split='98,2,0' (train,valid,test)"
                )
        else:
            self.mock = True
            self.split = "1,1,1"
        self.split_matrix = convert_split_vector_to_split_matrix(
            parse_and_normalize_split(self.split)
        )

    def prefixes(self) -> list[str]:
        """Every dataset prefix named by ``blend`` or ``blend_per_split`` (in order)."""
        blends = [self.blend] if self.blend is not None else list(self.blend_per_split or [])
        return [prefix for blend in blends if blend is not None for prefix in blend[0]]


@dataclass
class GPTDatasetConfig(BlendedMegatronDatasetConfig):
    """Configuration of GPT datasets (megatron-core's ``GPTDatasetConfig``)."""

    reset_position_ids: Optional[bool] = None
    """Restart position ids after every EOD token (must be set to True or False)."""

    reset_attention_mask: Optional[bool] = None
    """Stop attention across EOD tokens (must be set to True or False)."""

    eod_mask_loss: Optional[bool] = None
    """Zero the loss mask on EOD tokens (must be set to True or False)."""

    create_attention_mask: bool = True
    """Return the ``[1, seq, seq]`` boolean ``attention_mask`` (True = masked)."""

    drop_last_partial_validation_sequence: bool = True
    """Drop the last partial sample of the valid split (else it is padded)."""

    add_extra_token_to_sequence: bool = True
    """Draw ``sequence_length + 1`` tokens so tokens and labels are both full length."""

    object_storage_cache_path: Optional[str] = None
    """Local directory caching ``.idx`` files of s3:// or msc:// datasets."""

    data_parallel_size: int = 1
    """Data parallel size, an integer >= 1 (kept for Megatron compatibility)."""

    sequence_parallel_size: int = 0
    """Sequence parallel size under TP, an integer >= 0; 0 when disabled (Megatron
    compatibility)."""

    hybrid_context_parallel: bool = False
    """Hybrid context parallelism flag (Megatron compatibility)."""

    sequences_per_dataset: Optional[dict[str, tuple[int, int]]] = None
    """``{prefix: (sequence_count, document_count)}`` or the path of such a JSON file;
    start-up then opens one file instead of reading every ``.idx`` header. Any false
    value (``None``, ``False``, ``0``, ``""``, ``{}``) means none, as in megatron-core,
    which tests it with ``if config.sequences_per_dataset``."""

    token_dtype_code: Optional[int] = field(init=False, default=None)
    """Derived: 4 (int32) when ``vocab_size > 65536``, 8 (uint16) otherwise, None if unknown."""

    context_parallel_size: Optional[int] = None
    """Context parallel size (an integer >= 1, or None), for padding packed sequences."""

    inter_document_masking: bool = field(default=False, kw_only=True)
    """Megatron-LM main: samples add ``cu_seqlens`` (document bounds, int32, padded to
    seq + 1 with seq) and ``max_seqlen``; positions restart per document; no attention_mask."""

    return_cu_seqlens: bool = field(default=False, kw_only=True)
    """tokenloom extension (keyword only, so that subclasses' fields keep megatron-core's
    positions): add ``cu_seqlens`` (int32 document boundaries within the
    sample, from 0 to seq length) and ``max_seqlen`` (int32 scalar) to each sample for
    variable-length attention."""

    return_document_ranges: bool = field(default=False, kw_only=True)
    """tokenloom extension (keyword only): add ``document_ranges`` to each sample, an
    int64 ``[k, 3]`` array of rows ``(document id, token start, token end)``: the
    document parts the sample's tokens were read from, token offsets relative to each
    document, end exclusive (:mod:`tokenloom.index.ranges`). A batch from ``get_batch``
    then also carries ``document_ranges`` ``[B, width, 3]`` (padded with -1),
    ``document_range_counts`` ``[B]`` and ``tokens_per_source`` (loss-bearing tokens per
    ``dataset_id``), see docs/training.md. Off by default: the sample layout stays
    megatron-core's."""

    object_storage_config: Optional[object] = field(default=None, kw_only=True)
    """tokenloom extension (keyword only): a :class:`tokenloom.storage.ObjectStorageConfig` for s3:// and
    msc:// prefixes (chunk size, read-ahead, cached chunks, endpoint, retries); its
    ``path_to_idx_cache`` is replaced by ``object_storage_cache_path`` when that is set."""

    max_open_bin_files: int = field(default=256, kw_only=True)
    """tokenloom extension (keyword only): the most ``.bin`` files this process keeps
    mapped or open at once (an integer >= 1; default 256, well below ``ulimit -n`` 1,024
    and filesystem mmap quotas). The least recently used is closed and reopens on its
    next read; the process-wide pool takes the value of the last dataset built
    (:mod:`tokenloom.format.bin_pool`, docs/reliability.md)."""

    shuffle_mode: str = field(default="exact", kw_only=True)
    """tokenloom extension (keyword only): ``"exact"``, megatron-core's ``shuffle_index``;
    ``"bijection"``, a keyed permutation computed per sample, O(1) memory, another
    order (:mod:`tokenloom.index.bijection`, docs/shuffle.md)."""

    def __post_init__(self) -> None:
        """Validate the GPT fields and derive ``token_dtype_code``."""
        super().__post_init__()
        if self.tokenizer is None:
            raise ConfigError(
                "GPTDatasetConfig needs a tokenizer (it supplies eod and vocab_size): pass "
                "tokenizer=SimpleTokenizer(vocab_size=..., eod=...) or your tokenizer"
            )
        for name in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss"):
            if getattr(self, name) is None:
                raise ConfigError(f"{name} must be set to True or False (it is None)")
            checks.check_bool(name, getattr(self, name))
        for name in (
            "create_attention_mask",
            "drop_last_partial_validation_sequence",
            "add_extra_token_to_sequence",
            "hybrid_context_parallel",
            "inter_document_masking",
            "return_cu_seqlens",
            "return_document_ranges",
        ):
            checks.check_bool(name, getattr(self, name))
        checks.check_int("data_parallel_size", self.data_parallel_size, 1)
        checks.check_int("max_open_bin_files", self.max_open_bin_files, 1)
        checks.check_int("sequence_parallel_size", self.sequence_parallel_size, 0)
        if self.context_parallel_size is not None:
            checks.check_int("context_parallel_size", self.context_parallel_size, 1)
        vocab_size = read_attribute(self.tokenizer, "vocab_size", None)
        checks.check_special_ids(self.tokenizer, vocab_size)
        self.token_dtype_code = None if vocab_size is None else (4 if vocab_size > 65536 else 8)
        self._check_sequences_per_dataset()
        checks.check_object_storage(self)
        checks.check_choice("shuffle_mode", self.shuffle_mode, ("exact", "bijection"))

    def _check_sequences_per_dataset(self) -> None:
        given: Any = self.sequences_per_dataset  # a mapping or a path (or a false value)
        if checks.means_none(given):
            self.sequences_per_dataset = None
            return
        if self.token_dtype_code is None:
            raise ConfigError(
                "sequences_per_dataset needs the tokenizer's vocab_size (it is None); fix the "
                "tokenizer or drop sequences_per_dataset"
            )
        self.sequences_per_dataset = load_sequences_per_dataset(given)
        missing = [p for p in self.prefixes() if p not in self.sequences_per_dataset]
        if missing:
            raise ConfigError(
                f"sequences_per_dataset has no entry for {missing[:5]}; regenerate it with "
                "`tokenloom build-sequences-per-dataset` for this blend"
            )

    def sequences_for(self, dataset_path: Optional[str]) -> Optional[tuple[int, int]]:
        """The ``(sequence_count, document_count)`` given for ``dataset_path``, if any."""
        if not self.sequences_per_dataset or dataset_path is None:
            return None
        return self.sequences_per_dataset.get(dataset_path)
