"""Fixtures of tests/provenance: real tokenizers, real text, built pairs."""

from tests.provenance.provenance_helpers import hf_prefix, spm_prefix  # noqa: F401
from tests.support.tokenizer_models import hf_path, real_texts, sentencepiece_path, tiktoken_path  # noqa: F401
