"""Tokenizers for ``tokenloom preprocess``, the demo and dataset configs.

Every tokenizer here follows :class:`Tokenizer` (``vocab_size``, ``eod``, ``pad``,
``unique_identifiers``, ``encode_batch``, ``decode``) and may be passed as the
``tokenizer`` of a dataset config.  :func:`load_tokenizer` builds one from a spec
string such as ``hf:tokenizer.json``, ``tiktoken:cl100k_base.tiktoken``,
``sentencepiece:spm.model`` or ``bytes``.  The backend libraries are imported only
when a tokenizer of that kind is loaded.
"""

from tokenloom.tokenizers.base import BaseTokenizer, Tokenizer
from tokenloom.tokenizers.byte_level import ByteTokenizer
from tokenloom.tokenizers.huggingface import HFTokenizer
from tokenloom.tokenizers.sentencepiece_model import SentencePieceTokenizer
from tokenloom.tokenizers.spec import KINDS, SPEC_HELP, load_tokenizer, parse_tokenizer_spec
from tokenloom.tokenizers.tiktoken_bpe import TiktokenTokenizer
from tokenloom.tokenizers.train import train_byte_level_bpe

__all__ = [
    "Tokenizer",
    "BaseTokenizer",
    "ByteTokenizer",
    "HFTokenizer",
    "TiktokenTokenizer",
    "SentencePieceTokenizer",
    "load_tokenizer",
    "parse_tokenizer_spec",
    "train_byte_level_bpe",
    "KINDS",
    "SPEC_HELP",
]
