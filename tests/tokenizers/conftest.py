"""Real tokenizer models: see tests/tokenizer_models.py."""

from tests.support.tokenizer_models import hf_path, real_texts, sentencepiece_path, tiktoken_path  # noqa: F401
