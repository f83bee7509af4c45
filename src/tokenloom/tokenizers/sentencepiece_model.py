"""SentencePiece models (a ``.model`` file from ``SentencePieceTrainer``).

Batches are encoded by one ``SentencePieceProcessor.encode(list_of_texts)`` call, which
runs in C++ over the whole list.  BOS/EOS are not added; the end-of-document id is the
model's ``eos_id`` (or ``eod``), the padding id its ``pad_id`` (None when disabled).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Union

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.base import BaseTokenizer, check_model_file, file_sha256


def _import_sentencepiece():
    try:
        import sentencepiece
    except ImportError as error:
        raise TokenizerError("SentencePiece models need the 'sentencepiece' package: "
                             "pip install 'tokenloom[tokenizers]'") from error
    return sentencepiece


class SentencePieceTokenizer(BaseTokenizer):
    """A SentencePiece model loaded from ``path``.

    Args:
        path: the ``.model`` file.
        eod: end-of-document piece or id; default the model's EOS.
        num_threads: threads of the batch encode (1: parallelism comes from preprocess
            workers instead).
    """

    def __init__(self, path: str, eod: Union[str, int, None] = None, num_threads: int = 1) -> None:
        sentencepiece = _import_sentencepiece()
        self.path = check_model_file(path, "SentencePiece", "pass the .model file written by "
                                     "SentencePieceTrainer")
        self.num_threads = max(int(num_threads), 1)
        self._processor = sentencepiece.SentencePieceProcessor()
        try:
            self._processor.Load(self.path)
        except (OSError, RuntimeError) as error:
            raise TokenizerError(f"{self.path}: not a SentencePiece model: {error}") from error
        self.vocab_size = int(self._processor.get_piece_size())
        self.eod = self._resolve(eod, self._processor.eos_id(), "eod")
        self.pad = self._resolve(None, self._processor.pad_id(), "pad")
        self._finish_init({"path": self.path, "eod": eod, "num_threads": num_threads}, {
            "class": type(self).__name__, "tokenizer_path": [self.path],
            "sha256": file_sha256(self.path)})

    def _resolve(self, explicit, default: int, what: str) -> Optional[int]:
        if explicit is None:
            return int(default) if default >= 0 else None
        if isinstance(explicit, int) or str(explicit).isdigit():
            value = int(explicit)
        else:
            value = int(self._processor.piece_to_id(explicit))
            if value == self._processor.unk_id() and explicit != self._processor.id_to_piece(value):
                raise TokenizerError(f"{self.path}: {what} piece {explicit!r} is not in the model")
        if not 0 <= value < self.vocab_size:
            raise TokenizerError(f"{self.path}: {what} id {value} is outside "
                                 f"0..{self.vocab_size - 1}")
        return value

    def _encode_lists(self, texts: Sequence[str]) -> List[List[int]]:
        try:
            return self._processor.encode(list(texts), out_type=int, add_bos=False, add_eos=False,
                                          num_threads=self.num_threads)
        except TypeError as error:
            raise TokenizerError(f"{self.path}: every document must be a str: {error}") from error

    def decode(self, ids) -> str:
        """Text of ``ids`` (control ids such as EOS decode to nothing)."""
        ids = self._id_list(ids)
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise TokenizerError(f"{self.path}: id {bad[0]} is outside 0..{self.vocab_size - 1}")
        return self._processor.decode(ids)

    @property
    def backend(self):
        """The underlying ``sentencepiece.SentencePieceProcessor``."""
        return self._processor


__all__ = ["SentencePieceTokenizer"]
