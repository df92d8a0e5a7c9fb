"""A character tokenizer for the nano models, built in code and saved as a standard Hugging Face tokenizer.

One token per character (newline and printable ASCII), plus <pad> and <eos>. Because it is an ordinary
`PreTrainedTokenizerFast`, nano checkpoints load with `AutoTokenizer.from_pretrained` like real models do.
"""
from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS = "<pad>", "<eos>"
CHARACTERS = "\n" + "".join(chr(c) for c in range(32, 127))


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate([PAD, EOS, *CHARACTERS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, padding_side="left")


def check_encodable(tokenizer, texts: list[str]) -> None:
    """Raise if a text holds a character the tokenizer would silently map to padding."""
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if tokenizer.pad_token_id in ids:
            bad = sorted({c for c in text if c not in CHARACTERS})
            raise ValueError(f"text {text[:40]!r} has characters the tokenizer cannot encode: {bad}")
