"""Parse JSONL chunks into texts per JSON key, applying the bad-input policies.

Each input line is one JSON object; the value under every ``--json-keys`` key is one
document of that key's output.  What happens to lines that do not fit is a policy
(:class:`Policy`), each ``fail`` (stop with ``file:line`` and how to fix it) or
``skip`` (drop it and count it in the summary):

* ``on_bad_json`` (default ``fail``): the line is not valid JSON / UTF-8, or not a
  JSON object.  A broken line usually means a truncated or corrupt file.
* ``on_missing_key`` (default ``fail``): the object lacks a requested key.  With
  several keys, ``skip`` drops only that key's document of the line.
* ``on_bad_type`` (default ``fail``): the value is not a string (null, number, list...).
* ``on_empty`` (default ``skip``): the document encodes to zero tokens (e.g. ``""``).
  ``keep`` writes it anyway (just the end-of-document token with ``--append-eod``).

Blank lines (only whitespace) are not records; they are counted and reported.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from tokenloom.errors import PreprocessError
from tokenloom.preprocess.inputs import RawChunk

FAIL, SKIP, KEEP = "fail", "skip", "keep"
_MISSING = object()
ERROR_CHOICES = (FAIL, SKIP)
EMPTY_CHOICES = (SKIP, KEEP, FAIL)

# reason -> (summary label, singular and plural; {key} is the JSON key), controlling option
REASONS = {
    "bad_json": (("malformed JSON line", "malformed JSON lines"), "--on-bad-json"),
    "missing_key": (("record without key {key}", "records without key {key}"), "--on-missing-key"),
    "bad_type": (("non-string value of {key}", "non-string values of {key}"), "--on-bad-type"),
    "empty": (("empty {key} document", "empty {key} documents"), "--on-empty"),
}


@dataclass(frozen=True)
class Policy:
    """What to do with each kind of bad input (see the module docstring)."""

    on_bad_json: str = FAIL
    on_missing_key: str = FAIL
    on_bad_type: str = FAIL
    on_empty: str = SKIP

    def __post_init__(self) -> None:
        for name in ("on_bad_json", "on_missing_key", "on_bad_type"):
            if getattr(self, name) not in ERROR_CHOICES:
                raise PreprocessError(
                    f"{name}={getattr(self, name)!r}: choose one of {ERROR_CHOICES}")
        if self.on_empty not in EMPTY_CHOICES:
            raise PreprocessError(f"on_empty={self.on_empty!r}: choose one of {EMPTY_CHOICES}")


@dataclass
class ParsedChunk:
    """Texts of one chunk, per key, with the line number of each text."""

    path: str
    texts: Dict[str, List[str]]
    lines: Dict[str, List[int]]
    skipped: Counter = field(default_factory=Counter)  # (reason, key or "") -> count
    line_count: int = 0
    blank_lines: int = 0
    nbytes: int = 0
    disk_bytes: int = 0


def _preview(value, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail_or_count(policy_value: str, parsed: ParsedChunk, reason: str, key: str,
                   message: str) -> None:
    if policy_value == FAIL:
        option = REASONS[reason][1]
        raise PreprocessError(f"{message}; fix the input, or pass {option} skip to skip such "
                              "records (they are counted in the summary)")
    parsed.skipped[(reason, key)] += 1


def _split_lines(data: bytes) -> List[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the split after the final newline is not a line
    return lines


def _reason(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at column {error.colno}"
    return str(error)


def _record(line: bytes, number: int, policy: Policy, parsed: ParsedChunk):
    try:
        record = json.loads(line)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        _fail_or_count(policy.on_bad_json, parsed, "bad_json", "",
                       f"{parsed.path}:{number}: malformed JSON ({_reason(error)})")
        return None
    if not isinstance(record, dict):
        _fail_or_count(policy.on_bad_json, parsed, "bad_json", "",
                       f"{parsed.path}:{number}: expected a JSON object, got "
                       f"{type(record).__name__} {_preview(record)}")
        return None
    return record


def _take(record: dict, key: str, number: int, policy: Policy, parsed: ParsedChunk):
    value = record.get(key, _MISSING)
    if type(value) is str:  # the common case first
        return value
    where = f"{parsed.path}:{number}"
    if value is _MISSING:
        keys = ", ".join(map(repr, list(record)[:8])) or "none"
        _fail_or_count(policy.on_missing_key, parsed, "missing_key", key,
                       f"{where}: JSON key {key!r} is missing (the object has keys: {keys}); "
                       "choose the key with --json-keys")
        return None
    if not isinstance(value, str):
        _fail_or_count(policy.on_bad_type, parsed, "bad_type", key,
                       f"{where}: key {key!r} holds {type(value).__name__} {_preview(value)}, "
                       "not a string")
        return None
    return value


def parse_chunk(chunk: RawChunk, keys: Sequence[str], policy: Policy) -> ParsedChunk:
    """Parse every line of ``chunk``; bad lines fail or are counted per ``policy``."""
    parsed = ParsedChunk(chunk.path, {key: [] for key in keys}, {key: [] for key in keys},
                         nbytes=len(chunk.data), disk_bytes=chunk.disk_bytes)
    lines = _split_lines(chunk.data)
    parsed.line_count = len(lines)
    for number, line in enumerate(lines, start=chunk.first_line):
        if not line.strip():
            parsed.blank_lines += 1
            continue
        record = _record(line, number, policy, parsed)
        if record is None:
            continue
        for key in keys:
            value = _take(record, key, number, policy, parsed)
            if value is not None:
                parsed.texts[key].append(value)
                parsed.lines[key].append(number)
    return parsed


def skipped_labels(skipped: Counter) -> List[Tuple[str, int]]:
    """Labels of the skip counts, e.g. ``("records without key 'text'", 3)``, in a stable order."""
    order = list(REASONS)
    items = sorted(skipped.items(), key=lambda item: (order.index(item[0][0]), item[0][1]))
    labels = []
    for (reason, key), count in items:
        singular, plural = REASONS[reason][0]
        labels.append(((singular if count == 1 else plural).format(key=repr(key)), count))
    return labels


__all__ = ["Policy", "ParsedChunk", "parse_chunk", "skipped_labels", "REASONS",
           "ERROR_CHOICES", "EMPTY_CHOICES", "FAIL", "SKIP", "KEEP"]
