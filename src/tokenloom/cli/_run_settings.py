"""What the first line of ``tokenloom preprocess`` says about the run's settings.

:func:`settings_line` names every setting in which the run differs from Megatron-LM's
``tools/preprocess_data.py`` given the same command line, with the flag that changes
it; ``settings: as Megatron-LM`` means none, and then the bytes are Megatron's (every
golden case of ``../shared/golden/megatron-preprocess/`` prints it).

The tokenizer is not a difference: Megatron's flags build Megatron's tokenizer, and
tokenloom's ``--tokenizer SPEC`` form has Megatron-LM main's defaults (what the
Hugging Face post-processor adds is written, ``--no-add-special-tokens`` leaves it
out, as Megatron's ``--tokenizer-hf-no-include-special-tokens``).  What it adds to
every document is told beside the tokenizer instead (:func:`added_tokens_note`).
"""

from __future__ import annotations

import argparse
from typing import Any, Optional

from tokenloom.attributes import read_attribute

MEGATRON_POLICY = {
    "on_bad_json": "fail",
    "on_missing_key": "fail",
    "on_bad_type": "fail",
    "on_empty": "keep",
    "on_blank_line": "fail",
}
"""What Megatron does with each kind of bad record (it stops, or keeps empty documents)."""


def added_tokens_note(tokenizer: Any) -> Optional[str]:
    """What the tokenizer writes into every document besides the text (the Hugging Face
    post-processor's ids, a legacy Llama 2 BOS), or None when nothing."""
    added = read_attribute(tokenizer, "added_by_post_processor", None)
    ids = added() if added is not None else []
    if ids:
        return f"post-processor adds {ids} to every document"
    if read_attribute(tokenizer, "add_bos", False):
        return f"BOS {read_attribute(tokenizer, 'bos', None)} on every document"
    return None


def settings_line(policy: Any, args: argparse.Namespace) -> str:
    """``settings: ...``: each bad-record policy that is not Megatron's and a rule-based
    sentence splitter, with their flags; ``settings: as Megatron-LM`` when none."""
    parts = []
    for field, value in MEGATRON_POLICY.items():
        ours = read_attribute(policy, field)
        if ours != value:
            flag = "--" + field.replace("_", "-")
            theirs = "Megatron stops" if value == "fail" else f"Megatron: {value}"
            parts.append(f"{flag} {ours} ({theirs})")
    if read_attribute(args, "split_sentences_rules", False):
        parts.append("sentences split by rules (Megatron: --split-sentences, punkt)")
    return "settings: " + ("; ".join(parts) if parts else "as Megatron-LM")


def run_line(tokenizer: Any, policy: Any, args: argparse.Namespace) -> str:
    """The first line printed: the tokenizer (and what it adds), keys, workers, settings."""
    note = added_tokens_note(tokenizer)
    return (
        f"tokenloom preprocess: {tokenizer!r}{f' ({note})' if note else ''}, "
        f"{len(args.json_keys)} key(s), {args.workers} worker(s); "
        f"{settings_line(policy, args)}"
    )


__all__ = ["MEGATRON_POLICY", "added_tokens_note", "settings_line", "run_line"]
