"""Tokenizers for ``tokenloom preprocess``, the demo and dataset configs.

Every tokenizer here follows :class:`Tokenizer` (``vocab_size``, ``eod``, ``pad``,
``unique_identifiers``, ``encode_batch``, ``decode``) and may be passed as the
``tokenizer`` of a dataset config.  :func:`load_tokenizer` builds one from a spec
string such as ``hf:tokenizer.json``, ``tiktoken:cl100k_base.tiktoken``,
``sentencepiece:spm.model`` or ``bytes``; :func:`build_megatron_tokenizer` from
Megatron-LM's ``--tokenizer-type`` flags.  ``identity()`` describes any of them.  The backend libraries are imported only
when a tokenizer of that kind is loaded.
"""

from tokenloom.tokenizers.base import BaseTokenizer, Tokenizer
from tokenloom.tokenizers.byte_level import ByteTokenizer
from tokenloom.tokenizers.huggingface import HFTokenizer
from tokenloom.tokenizers.megatron import MegatronTokenizerArgs, build_megatron_tokenizer
from tokenloom.tokenizers.megatron_tiktoken import MegatronTikTokenizer
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
    "build_megatron_tokenizer",
    "MegatronTokenizerArgs",
    "MegatronTikTokenizer",
    "parse_tokenizer_spec",
    "train_byte_level_bpe",
    "KINDS",
    "SPEC_HELP",
]
