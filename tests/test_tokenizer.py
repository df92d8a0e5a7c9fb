"""The character tokenizer: one token per character, special ids, left padding, save/load, encodability check."""
import pytest
from transformers import AutoTokenizer

from rlbook.tokenizer import CHARACTERS, EOS, PAD, char_tokenizer, check_encodable


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer()


def test_vocabulary(tok):
    assert len(CHARACTERS) == 96 and CHARACTERS[0] == "\n" and CHARACTERS[1:] == "".join(map(chr, range(32, 127)))
    assert len(tok) == 98
    assert (tok.pad_token, tok.eos_token) == (PAD, EOS)
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 1)


@pytest.mark.parametrize("char", list(CHARACTERS))
def test_every_character_round_trips_as_one_token(tok, char):
    ids = tok(char, add_special_tokens=False)["input_ids"]
    assert ids == [CHARACTERS.index(char) + 2]
    assert tok.decode(ids) == char


def test_strings_round_trip_one_token_per_char(tok):
    text = "47+385=\n  385+7=392;392+40=432;432 <think></think><answer>A:T B:F</answer>  "
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert ids == [CHARACTERS.index(c) + 2 for c in text]
    assert tok.decode(ids) == text
    assert tok(CHARACTERS, add_special_tokens=False)["input_ids"] == list(range(2, 98))
    assert tok.decode(list(range(2, 98))) == CHARACTERS


def test_no_special_tokens_added_and_special_decoding(tok):
    assert tok("ab")["input_ids"] == tok("ab", add_special_tokens=False)["input_ids"] == [68, 69]  # "a" is chr(97): index 97 - 32 + 1 in CHARACTERS, plus 2 specials
    ids = [tok.pad_token_id, tok.eos_token_id] + tok("hi", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "hi"


def test_left_padding(tok):
    assert tok.padding_side == "left"
    enc = tok(["ab", "abcd", "a"], padding=True, add_special_tokens=False)
    a, b, c, d = (CHARACTERS.index(ch) + 2 for ch in "abcd")
    assert enc["input_ids"] == [[0, 0, a, b], [a, b, c, d], [0, 0, 0, a]]
    assert enc["attention_mask"] == [[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]]


def test_save_and_load_with_auto_tokenizer(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    texts = ["47+385=", CHARACTERS, "A:~B&C B:A>C ?", "x"]
    assert loaded(texts, padding=True)["input_ids"] == tok(texts, padding=True)["input_ids"]
    assert loaded(texts, padding=True)["attention_mask"] == tok(texts, padding=True)["attention_mask"]
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.padding_side) == (0, 1, "left")
    assert len(loaded) == len(tok)
    assert loaded.decode(loaded(CHARACTERS)["input_ids"]) == CHARACTERS


def test_check_encodable(tok):
    check_encodable(tok, ["47+385=", CHARACTERS, ""])  # fine
    with pytest.raises(ValueError) as error:
        check_encodable(tok, ["fine", "café au lait"])
    assert "é" in str(error.value) and "caf" in str(error.value)
    with pytest.raises(ValueError, match=r"\\t"):
        check_encodable(tok, ["a\tb"])
