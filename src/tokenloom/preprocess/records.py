"""Parse input chunks into documents per JSON key, applying the bad-input policies.

Each input line (JSONL) or row (Parquet, Hugging Face datasets, Python records) is one
record; the value under every ``--json-keys`` key is one document of that key's
output.  A string is the document's one sentence; a JSON list of strings gives its
sentences (Megatron's form: each is tokenized alone and becomes its own sequence).
What happens to records that do not fit is a policy (:class:`Policy`), each ``fail``
(stop with ``file:line`` and how to fix it) or ``skip`` (drop it, count it):

* ``on_bad_json`` (default ``fail``): the line is not valid JSON / UTF-8 (a lone
  surrogate escape, nesting too deep for the parser), or not a JSON object.
* ``on_missing_key`` (default ``fail``): the record lacks a requested key.  With
  several keys, ``skip`` drops only that key's document of the record.
* ``on_bad_type`` (default ``fail``): the value is neither a string nor a list of strings.
* ``on_empty`` (default ``keep``): the document encodes to zero tokens (``""``).
  ``keep`` is Megatron's rule: the document stays, with no sequence and no EOD, so
  that every key keeps one document per record; ``skip`` drops it, ``fail`` stops.
* ``on_blank_line`` (default ``skip``; ``fail`` with Megatron's flags, where a blank
  line stops the run): a line holding only whitespace.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from tokenloom.errors import PreprocessError
from tokenloom.preprocess.inputs import RawChunk

FAIL, SKIP, KEEP = "fail", "skip", "keep"
_MISSING = object()
ERROR_CHOICES = (FAIL, SKIP)
EMPTY_CHOICES = (KEEP, SKIP, FAIL)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

# reason -> (summary label, singular and plural; {key} is the JSON key), controlling option
REASONS = {
    "bad_json": (("malformed JSON line", "malformed JSON lines"), "--on-bad-json"),
    "missing_key": (("record without key {key}", "records without key {key}"), "--on-missing-key"),
    "bad_type": (("non-string value of {key}", "non-string values of {key}"), "--on-bad-type"),
    "empty": (("empty {key} document", "empty {key} documents"), "--on-empty"),
    "blank": (("blank line", "blank lines"), "--on-blank-line"),
}


@dataclass(frozen=True)
class Policy:
    """What to do with each kind of bad input (see the module docstring)."""

    on_bad_json: str = FAIL
    """Invalid JSON/UTF-8 or not an object: ``fail`` or ``skip``."""
    on_missing_key: str = FAIL
    """A record without a ``json_keys`` key: ``fail`` or ``skip`` (that key only)."""
    on_bad_type: str = FAIL
    """A value that is neither a string nor a list of strings: ``fail`` or ``skip``."""
    on_empty: str = KEEP
    """A document of zero tokens: ``keep`` (Megatron's rule), ``skip`` or ``fail``."""
    on_blank_line: str = SKIP
    """A whitespace-only line: ``skip`` (counted) or ``fail`` (Megatron stops)."""

    def __post_init__(self) -> None:
        for name in ("on_bad_json", "on_missing_key", "on_bad_type", "on_blank_line"):
            if getattr(self, name) not in ERROR_CHOICES:
                raise PreprocessError(
                    f"{name}={getattr(self, name)!r}: choose one of {ERROR_CHOICES}"
                )
        if self.on_empty not in EMPTY_CHOICES:
            raise PreprocessError(f"on_empty={self.on_empty!r}: choose one of {EMPTY_CHOICES}")


@dataclass
class ParsedChunk:
    """Documents of one chunk, per key: their sentences (flat), sentence counts, line numbers."""

    path: str
    texts: dict[str, list[str]]
    counts: dict[str, list[int]]
    lines: dict[str, list[int]]
    skipped: Counter = field(default_factory=Counter)  # (reason, key or "") -> count
    first_line: int = 1
    line_count: int = 0
    blank_lines: int = 0
    nbytes: int = 0
    disk_bytes: int = 0


Splitter = Optional[Callable[[str], list[str]]]


def _preview(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except RecursionError:  # parsed near the recursion limit: too deep to show
        return f"(a {type(value).__name__} nested too deeply to show)"
    except (TypeError, ValueError):
        text = repr(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fail_or_count(
    policy_value: str, parsed: ParsedChunk, reason: str, key: str, message: str
) -> None:
    """Raise ``message`` (``fail``) or count the record under ``reason`` (``skip``)."""
    if policy_value == FAIL:
        option = REASONS[reason][1]
        raise PreprocessError(
            f"{message}; fix the input, or pass {option} skip to skip such "
            "records (they are counted in the summary)"
        )
    parsed.skipped[(reason, key)] += 1


def _split_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the split after the final newline is not a line
    return lines


def _reason(error: BaseException) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at column {error.colno}"
    if isinstance(error, RecursionError):
        return "nested too deeply for the JSON parser"
    return str(error)


def _record(line: bytes, number: int, policy: Policy, parsed: ParsedChunk) -> Optional[dict]:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        fail_or_count(
            policy.on_bad_json,
            parsed,
            "bad_json",
            "",
            f"{parsed.path}:{number}: malformed JSON ({_reason(error)})",
        )
        return None
    if not isinstance(record, dict):
        fail_or_count(
            policy.on_bad_json,
            parsed,
            "bad_json",
            "",
            f"{parsed.path}:{number}: expected a JSON object, got "
            f"{type(record).__name__} {_preview(record)}",
        )
        return None
    return record


def _lone_surrogate(record: dict, keys: Sequence[str]) -> Optional[str]:
    """The first key whose text holds a lone surrogate (not encodable as UTF-8), if any."""
    for key in keys:
        value = record.get(key)
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return key
    return None


def _sentences(
    value: Any, key: str, where: str, policy: Policy, parsed: ParsedChunk
) -> Optional[list[str]]:
    if type(value) is str:  # the common case first
        return [value]
    if value is _MISSING:
        return None
    if isinstance(value, list) and all(type(item) is str for item in value):
        return value
    fail_or_count(
        policy.on_bad_type,
        parsed,
        "bad_type",
        key,
        f"{where}: key {key!r} holds {type(value).__name__} {_preview(value)}, "
        "not a string or a list of strings",
    )
    return None


def add_record(
    record: Any,
    number: int,
    where: str,
    keys: Sequence[str],
    policy: Policy,
    parsed: ParsedChunk,
    splitter: Splitter,
    check_surrogates: bool,
) -> None:
    """Add the documents of one record (a dict) to ``parsed``, or fail/count per ``policy``.

    ``check_surrogates``: look for lone surrogates (only ``\\udXXX`` escapes make them).
    """
    bad_key = _lone_surrogate(record, keys) if check_surrogates else None
    if bad_key is not None:
        fail_or_count(
            policy.on_bad_json,
            parsed,
            "bad_json",
            "",
            f"{where}: key {bad_key!r} holds a lone UTF-16 surrogate (a \\ud800-"
            f"\\udfff escape), which is not text: {_preview(record.get(bad_key))}",
        )
        return
    for key in keys:
        value = record.get(key, _MISSING)
        if value is _MISSING:
            present = ", ".join(map(repr, list(record)[:8])) or "none"
            fail_or_count(
                policy.on_missing_key,
                parsed,
                "missing_key",
                key,
                f"{where}: JSON key {key!r} is missing (the object has keys: "
                f"{present}); choose the key with --json-keys",
            )
            continue
        sentences = _sentences(value, key, where, policy, parsed)
        if sentences is None:
            continue
        if splitter is not None:
            sentences = [piece for sentence in sentences for piece in splitter(sentence)]
        parsed.texts[key].extend(sentences)
        parsed.counts[key].append(len(sentences))
        parsed.lines[key].append(number)


def new_parsed(path: str, keys: Sequence[str], first_line: int) -> ParsedChunk:
    """An empty :class:`ParsedChunk` for ``keys``."""
    return ParsedChunk(
        path,
        {key: [] for key in keys},
        {key: [] for key in keys},
        {key: [] for key in keys},
        first_line=first_line,
    )


def parse_chunk(
    chunk: RawChunk, keys: Sequence[str], policy: Policy, splitter: Splitter = None
) -> ParsedChunk:
    """Parse every line of ``chunk``; bad lines fail or are counted per ``policy``."""
    parsed = new_parsed(chunk.path, keys, chunk.first_line)
    parsed.nbytes, parsed.disk_bytes = len(chunk.data), chunk.disk_bytes
    lines = _split_lines(chunk.data)
    parsed.line_count = len(lines)
    for number, line in enumerate(lines, start=chunk.first_line):
        if not line.strip():
            if policy.on_blank_line == FAIL:
                raise PreprocessError(
                    f"{chunk.path}:{number}: blank line (Megatron stops here "
                    "too); remove it, or pass --on-blank-line skip"
                )
            parsed.blank_lines += 1
            continue
        record = _record(line, number, policy, parsed)
        if record is not None:
            surrogates = b"\\u" in line and _SURROGATE_ESCAPE.search(line) is not None
            add_record(
                record, number, f"{chunk.path}:{number}", keys, policy, parsed, splitter, surrogates
            )
    return parsed


def skipped_labels(skipped: Counter) -> list[tuple[str, int]]:
    """Labels of the skip counts, e.g. ``("records without key 'text'", 3)``, in a stable order."""
    order = list(REASONS)
    items = sorted(skipped.items(), key=lambda item: (order.index(item[0][0]), item[0][1]))
    labels = []
    for (reason, key), count in items:
        if not count:
            continue
        singular, plural = REASONS[reason][0]
        labels.append(((singular if count == 1 else plural).format(key=repr(key)), count))
    return labels


__all__ = [
    "Policy",
    "ParsedChunk",
    "parse_chunk",
    "add_record",
    "new_parsed",
    "fail_or_count",
    "skipped_labels",
    "REASONS",
    "ERROR_CHOICES",
    "EMPTY_CHOICES",
    "FAIL",
    "SKIP",
    "KEEP",
]
