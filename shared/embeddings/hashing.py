"""`hash`: deterministic lexical embeddings by feature hashing, offline and free.

A text's features are its lowercased words, its adjacent word pairs and the
character 3-grams of each word with boundary marks (`<pr`, `pre`, ..., `rs>`),
so "prefers" and "preference" share something. Each feature is hashed with
BLAKE2b (never Python's `hash()`, which changes with PYTHONHASHSEED) to one of
`dim` buckets and a sign, added with its weight (word 1.0 > pair 0.6 > 3-gram
0.3), and the sum is scaled to unit length. The same text gives the same vector
in every process and on every machine.

Words are runs of letters and digits; a dot between two of them stays inside
the word ("3.11", "example.com"); every other character separates words.
A text with no words embeds as `no_text_vector`.

Speed (pure Python: numpy is not a dependency of the project): a word's
features (the word and its 3-grams, merged by bucket) are hashed once per
process and remembered, as are the 3-grams' own, in bounded tables, so a text
costs mostly dictionary lookups. A pair's bucket is the sum, modulo `dim`, of a
"left" offset of its first word and a "right" offset of its second, and its sign
the product of theirs (offsets and signs from bits of each word's own BLAKE2b
hash): as good as a random bucket per pair for feature hashing, with no hashing
or table per pair.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from shared.embeddings.base import no_text_vector

WORD_WEIGHT = 1.0
PAIR_WEIGHT = 0.6
NGRAM_WEIGHT = 0.3

_WORD = re.compile(r"[^\W_]+(?:\.[^\W_]+)*")
# Bounds on the remembered features; past one, that table starts again empty.
_MAX_WORDS = 1 << 15
_MAX_NGRAMS = 1 << 16
_BITS20 = (1 << 20) - 1

Features = tuple[tuple[int, float], ...]  # (bucket, signed weight), one per bucket
# A word's features, then its pair offsets and signs: (left, left sign x weight) for
# a pair it starts, (right, right sign) for a pair it ends.
WordEntry = tuple[Features, int, float, int, float]


def tokenize(text: str) -> list[str]:
    """The lowercased words of `text`, in order."""
    return _WORD.findall(text.lower())


class HashEmbedder:
    """Feature-hashing embeddings of `dim` floats; documents and queries alike."""

    name = "hash"
    model = "hash-v1"  # names the feature scheme; change it when the scheme changes
    # Lexical, like the full text: with the per-query factors (`Fusion`: its 1st to 5th
    # distance gap, about 0.05-0.1, and how many of its top 5 the text also found) it
    # mostly breaks the text's ties and adds rows the text missed. Measured by
    # bench/recall.py (docs/performance.md#archive-recall).
    vector_weight = 0.4

    def __init__(self, dim: int) -> None:
        if dim < 1:
            raise ValueError("dim must be at least 1")
        self.dim = dim
        self._words: dict[str, WordEntry] = {}
        self._ngrams: dict[str, tuple[int, float]] = {}  # 3-gram -> (bucket, weight)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(text) for text in texts]

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed(texts)

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        # Pure computation of well under a millisecond per query: inline is cheaper
        # than a hop to a thread.
        return self.embed(texts)

    def close(self) -> None:
        """Nothing to close: the same methods as the network providers."""

    async def aclose(self) -> None:
        """Nothing to close."""

    def embed_one(self, text: str) -> list[float]:
        words = tokenize(text)
        if not words:
            return no_text_vector(self.dim)
        dim = self.dim
        sums: dict[int, float] = {}
        get = sums.get
        known = self._words
        left = -1  # no pair before the first word
        left_weight = 0.0
        for word in words:
            entry = known.get(word)
            if entry is None:
                entry = self._learn(word)
            features, next_left, next_left_weight, right, right_sign = entry
            for bucket, weight in features:
                sums[bucket] = get(bucket, 0.0) + weight
            if left >= 0:
                bucket = (left + right) % dim
                sums[bucket] = get(bucket, 0.0) + left_weight * right_sign
            left, left_weight = next_left, next_left_weight
        norm = math.hypot(*sums.values())
        if norm == 0.0:  # signed features can cancel; all of them, in principle
            return no_text_vector(dim)
        scale = 1.0 / norm
        vector = [0.0] * dim
        for bucket, value in sums.items():
            vector[bucket] = value * scale
        return vector

    def _learn(self, word: str) -> WordEntry:
        """Hash `word` and its 3-grams, and remember them."""
        dim = self.dim
        word_hash = _hash64(b"w\x1f" + word.encode())
        # Bit 0: the word's sign, bits 1-2: its pair signs, bits 3-22: its bucket,
        # bits 23-42 and 43-62: its pair offsets (dim is at most 2,000 < 2^20).
        merged = {((word_hash >> 3) & _BITS20) % dim: _sign(word_hash, 0) * WORD_WEIGHT}
        marked = f"<{word}>"
        ngrams = self._ngrams
        for start in range(len(marked) - 2):
            ngram = marked[start : start + 3]
            feature = ngrams.get(ngram)
            if feature is None:
                ngram_hash = _hash64(b"g\x1f" + ngram.encode())
                feature = ((ngram_hash >> 1) % dim, _sign(ngram_hash, 0) * NGRAM_WEIGHT)
                if len(ngrams) >= _MAX_NGRAMS:
                    ngrams.clear()
                ngrams[ngram] = feature
            bucket, weight = feature
            merged[bucket] = merged.get(bucket, 0.0) + weight
        entry = (
            tuple(merged.items()),
            ((word_hash >> 23) & _BITS20) % dim,
            _sign(word_hash, 1) * PAIR_WEIGHT,
            ((word_hash >> 43) & _BITS20) % dim,
            _sign(word_hash, 2),
        )
        if len(self._words) >= _MAX_WORDS:
            self._words.clear()
        self._words[word] = entry
        return entry


def _sign(value: int, bit: int) -> float:
    return 1.0 if (value >> bit) & 1 else -1.0


def _hash64(feature: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(feature, digest_size=8).digest(), "little")
