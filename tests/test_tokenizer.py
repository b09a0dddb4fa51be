"""The offline GPT-2 tokenizer is byte-for-byte GPT-2's, and never touches the network."""

import shutil
import socket

import pytest
import tiktoken

import course_utils as cu
from course_utils import tokenizer

KNOWN = [
    ("Hello, world", [15496, 11, 995]),
    (
        "Hello, do you like tea? <|endoftext|> In the sunlit terraces of someunknownPlace.",
        [
            15496,
            11,
            466,
            345,
            588,
            8887,
            30,
            220,
            50256,
            554,
            262,
            4252,
            18250,
            8812,
            2114,
            286,
            617,
            34680,
            27271,
            13,
        ],
    ),
    ("Akwirw ier", [33901, 86, 343, 86, 220, 959]),
    ("It's 2024!  Spaces\tand\nnewlines", None),  # round-trip only
]


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the tokenizer tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def fresh_cache():
    tokenizer.gpt2_tokenizer.cache_clear()
    yield
    tokenizer.gpt2_tokenizer.cache_clear()


@pytest.mark.parametrize(("text", "ids"), KNOWN)
def test_known_gpt2_ids_and_round_trip(text, ids, no_network, fresh_cache):
    enc = cu.gpt2_tokenizer()
    got = enc.encode(text, allowed_special={"<|endoftext|>"})
    if ids is not None:
        assert got == ids
    assert enc.decode(got) == text


def test_is_a_real_tiktoken_encoding_with_gpt2_vocabulary():
    enc = cu.gpt2_tokenizer()
    assert isinstance(enc, tiktoken.Encoding)
    assert enc.n_vocab == 50257
    assert enc.eot_token == 50256
    assert enc.decode_single_token_bytes(15496) == b"Hello"


def test_special_token_must_be_allowed_explicitly():
    with pytest.raises(ValueError, match="endoftext"):
        cu.gpt2_tokenizer().encode("a <|endoftext|> b")


def test_damaged_ranks_file_is_refused(tmp_path, monkeypatch, fresh_cache):
    damaged = tmp_path / "gpt2.tiktoken"
    shutil.copy(tokenizer.RANKS_FILE, damaged)
    with damaged.open("ab") as f:
        f.write(b"eA== 50257\n")
    monkeypatch.setattr(tokenizer, "RANKS_FILE", damaged)
    with pytest.raises(ValueError, match="damaged"):
        cu.gpt2_tokenizer()


def test_missing_ranks_file_says_where_it_was_expected(tmp_path, monkeypatch, fresh_cache):
    monkeypatch.setattr(tokenizer, "RANKS_FILE", tmp_path / "nope.tiktoken")
    with pytest.raises(FileNotFoundError, match="nope.tiktoken"):
        cu.gpt2_tokenizer()
