"""A look at the data: the tokenizer to decode with, decoded documents, and plots.

Shared by ``tokenloom inspect`` (``--show``, ``--plot``) and ``tokenloom preview``.
matplotlib (the ``plot`` extra) is imported only by :func:`plot_datasets`, and only
its Agg canvas is used: no pyplot, no global backend change.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy

from tokenloom.atomic import atomic_write_bytes
from tokenloom.errors import ConfigError, TokenizerError

_SPEC_KINDS = {
    "HFTokenizer": "hf",
    "TiktokenTokenizer": "tiktoken",
    "SentencePieceTokenizer": "sentencepiece",
}
_BLOCK = 1 << 16  # tokens per sampled block of a large .bin
_MAX_TOKENIZER_FILE_BYTES = 1 << 30  # the tokenizers' own read limit (tokenizer.json, vocab)


def tokenizer_from_sidecar(record: Optional[Mapping[str, Any]]) -> tuple[Any, str]:
    """``(tokenizer or None, note)``: the sidecar's tokenizer, loaded when its files are
    still where the sidecar says and still hash the same."""
    from tokenloom.tokenizers import load_tokenizer
    from tokenloom.tokenizers.base import file_sha256

    identity = dict((record or {}).get("tokenizer") or {})
    kind, files = identity.get("kind"), list(identity.get("files") or [])
    if kind == "ByteTokenizer":
        return load_tokenizer("bytes"), "decoded with the sidecar's tokenizer (bytes)"
    if kind not in _SPEC_KINDS or not files or not all(os.path.isfile(f) for f in files):
        return None, "the sidecar's tokenizer cannot be loaded here: give --tokenizer SPEC"
    large = [f for f in files if os.path.getsize(f) > _MAX_TOKENIZER_FILE_BYTES]
    if large:  # a crafted sidecar naming a sparse 1 TiB file would be hashed for an hour
        return None, f"{large[0]} is too large for a tokenizer file: give --tokenizer SPEC"
    if identity.get("sha256") and "+".join(map(file_sha256, files)) != identity["sha256"]:
        return None, f"{files[0]} changed since the data was made: give --tokenizer SPEC"
    merges = files[1] if kind == "HFTokenizer" and len(files) == 2 else None
    try:
        tokenizer = load_tokenizer(f"{_SPEC_KINDS[kind]}:{files[0]}", merges=merges)
    except TokenizerError as error:
        return None, f"the sidecar's tokenizer does not load ({error}): give --tokenizer SPEC"
    return tokenizer, f"decoded with the sidecar's tokenizer {files[0]}"


def resolve_tokenizer(spec: Optional[str], record: Optional[Mapping[str, Any]]) -> tuple[Any, str]:
    """The tokenizer to decode with: ``spec`` when given, else the sidecar's."""
    if spec:
        from tokenloom.tokenizers import load_tokenizer

        return load_tokenizer(spec), f"decoded with {spec}"
    if record is None:
        return None, "no --tokenizer and no sidecar: showing token ids"
    return tokenizer_from_sidecar(record)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (``limit <= 0``: whole), marked when cut."""
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:limit] + f" [... {len(text) - limit} more characters]"


def document_rows(dataset: Any, tokenizer: Any, count: int, limit: int) -> list[dict[str, Any]]:
    """The first ``count`` documents of ``dataset``, decoded (sequences joined)."""
    doc_index = dataset.document_indices
    rows = []
    for doc in range(min(max(count, 0), int(doc_index.shape[0]) - 1)):
        sequences = [
            numpy.asarray(dataset[i]) for i in range(int(doc_index[doc]), int(doc_index[doc + 1]))
        ]
        ids = numpy.concatenate(sequences) if sequences else numpy.zeros(0, numpy.int64)
        text = tokenizer.decode(ids) if ids.size else ""
        rows.append(
            {
                "document": doc,
                "sequences": len(sequences),
                "tokens": int(ids.size),
                "text": shorten(text, limit),
            }
        )
    return rows


# -- plots --------------------------------------------------------------------------------
def document_lengths(dataset: Any) -> numpy.ndarray:
    """Tokens per document (int64)."""
    bounds = numpy.concatenate([[0], numpy.cumsum(dataset.sequence_lengths, dtype=numpy.int64)])
    documents = numpy.asarray(dataset.document_indices, dtype=numpy.int64)
    return bounds[documents[1:]] - bounds[documents[:-1]]


def sampled_tokens(dataset: Any, max_tokens: int) -> numpy.ndarray:
    """All token ids, or ``max_tokens`` of them in evenly spread blocks of a large file."""
    total = int(numpy.sum(dataset.sequence_lengths, dtype=numpy.int64))
    tokens = dataset.tokens
    if tokens is None:  # no mmap: read sequences, spread over the file
        step = max(total // max(max_tokens, 1), 1)
        picks = range(0, len(dataset), step if total > max_tokens else 1)
        parts = [numpy.asarray(dataset[i]) for i in picks]
        return numpy.concatenate(parts) if parts else numpy.zeros(0, numpy.int64)
    if total <= max_tokens:
        return numpy.asarray(tokens[:total])
    block = min(_BLOCK, max_tokens)
    starts = numpy.linspace(0, total - block, max(max_tokens // block, 1)).astype(numpy.int64)
    return numpy.concatenate([numpy.asarray(tokens[s : s + block]) for s in starts])


def _figure() -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'tokenloom[plot]'") from None
    figure = Figure(figsize=(15, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _draw_lengths(axis: Any, named_lengths: Sequence[tuple[str, numpy.ndarray]]) -> None:
    top = max((int(lengths.max()) for _, lengths in named_lengths if lengths.size), default=1)
    bins = numpy.geomspace(1, max(top, 2) + 1, 60)
    for name, lengths in named_lengths:
        axis.hist(
            numpy.maximum(lengths, 1),
            bins=bins,
            histtype="step",
            linewidth=1.5,
            label=f"{name} ({lengths.size:,} docs)",
        )
    axis.set(
        xscale="log",
        yscale="log",
        xlabel="tokens per document (log)",
        ylabel="documents (log)",
        title="document lengths",
    )


def _draw_frequencies(
    by_id: Any, by_rank: Any, named_counts: Sequence[tuple[str, numpy.ndarray]]
) -> None:
    for name, counts in named_counts:
        ids = numpy.flatnonzero(counts)
        by_id.plot(ids, counts[ids], ".", markersize=2, alpha=0.6, label=name)
        ranked = numpy.sort(counts[ids])[::-1]
        by_rank.plot(numpy.arange(1, ranked.size + 1), ranked, linewidth=1.5, label=name)
    by_id.set(
        yscale="log", xlabel="token id", ylabel="occurrences (log)", title="token-id frequency"
    )
    by_rank.set(
        xscale="log",
        yscale="log",
        xlabel="rank (log)",
        ylabel="occurrences (log)",
        title="token frequency by rank",
    )


def plot_datasets(
    datasets: Sequence[tuple[str, Any]], out_path: str, max_tokens: int
) -> dict[str, Any]:
    """Draw document-length histograms and token frequencies of ``(name, dataset)``s,
    all in one figure, to ``out_path`` (PNG, or what its extension says)."""
    figure = _figure()
    axes = figure.subplots(1, 3)
    lengths = [(name, document_lengths(dataset)) for name, dataset in datasets]
    counts, sampled = [], {}
    for name, dataset in datasets:
        tokens = sampled_tokens(dataset, max_tokens)
        sampled[name] = int(tokens.size)
        counts.append(
            (
                name,
                numpy.bincount(tokens.astype(numpy.int64, copy=False))
                if tokens.size
                else numpy.zeros(1, numpy.int64),
            )
        )
    _draw_lengths(axes[0], lengths)
    _draw_frequencies(axes[1], axes[2], counts)
    for axis in axes:
        axis.grid(True, which="major", alpha=0.3)
        axis.legend(fontsize="small")
    figure.suptitle(f"tokenloom inspect: {len(datasets)} dataset(s)")
    buffer = io.BytesIO()
    kind = os.path.splitext(out_path)[1][1:].lower() or "png"
    try:
        figure.savefig(buffer, format=kind)
    except ValueError as error:  # an extension matplotlib cannot write
        raise ConfigError(f"--plot {out_path}: {error}; use a .png (or .svg, .pdf) name") from None
    atomic_write_bytes(out_path, buffer.getvalue())  # a crash leaves no half-written image
    return {"path": os.path.abspath(out_path), "sampled_tokens": sampled}


__all__ = [
    "resolve_tokenizer",
    "tokenizer_from_sidecar",
    "document_rows",
    "shorten",
    "document_lengths",
    "sampled_tokens",
    "plot_datasets",
]
