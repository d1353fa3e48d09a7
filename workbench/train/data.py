"""Training data for the reference job: a generated English-like text corpus (byte tokens) and synthetic
recommendation batches. Nothing is downloaded.

The corpus comes from a small deterministic grammar (seeded), so it has structure a model can learn -- spelling,
word order, agreement between a sentence's subject and verb -- and a loss curve on it means something: a byte
model starts near ln(256) = 5.5 nats per byte and falls towards the grammar's entropy rate, about 0.22 nats per
byte (``grammar_entropy_nats_per_byte``). That floor counts the grammar's random choices per sentence -- plural or
not H(0.35) = 0.93 bits, then the subject log2 15 or log2 8 (3.59 bits on average), verb log2 12 = 3.58, object
log2 15 = 3.91, an optional time phrase 1 + 0.5 log2 8 = 2.5, the ending (7 entries, "." three times) 2.13, space or
newline H(0.15) = 0.61: 17.25 bits -- over the mean sentence length, 54.4 bytes: 0.317 bits = 0.220 nats per byte.
Every choice can be read back from the text (the lists' strings are distinct), so the text carries exactly those
bits; everything else (spelling, word order, agreement) is free to a model that has learnt it. The training text
(grammar seed 0) is 300 kB, which a model can partly memorise, so its training loss is not bounded by the floor;
the loss on the held-out text (``heldout_windows``, grammar seed 1: other sentences) is.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from functools import cache

import torch

_SUBJECTS = ["the miller", "a young sailor", "the old queen", "my neighbour", "the grey wolf", "a clever fox",
             "the blacksmith", "her brother", "the tired horse", "a quiet student", "the harbour master",
             "the village priest", "a travelling merchant", "the lighthouse keeper", "his daughter"]
_PLURAL_SUBJECTS = ["the children", "two farmers", "the soldiers", "the geese", "our cousins", "the fishermen",
                    "the weavers", "a few pilgrims"]
_VERBS = [("walks to", "walk to"), ("sings about", "sing about"), ("remembers", "remember"), ("carries", "carry"),
          ("looks at", "look at"), ("dreams of", "dream of"), ("mends", "mend"), ("follows", "follow"),
          ("paints", "paint"), ("builds", "build"), ("forgets", "forget"), ("finds", "find")]
_OBJECTS = ["the river", "a wooden boat", "the northern road", "an empty house", "the market square",
            "a silver key", "the winter garden", "the broken bell", "a letter from home", "the stone bridge",
            "the harvest moon", "a basket of apples", "the distant hills", "the lantern", "an old song"]
_TIMES = ["in the morning", "at dusk", "before the storm", "after supper", "every spring", "on market day",
          "when the bells ring", "late at night"]
_ENDINGS = [".", ".", ".", "!", "; nobody knows why.", ", and then rests.", ", slowly and with care."]
_PLURAL_P = 0.35
"""Probability that a sentence's subject is plural."""
_TIME_P = 0.5
"""Probability that a sentence has a time phrase."""
_NEWLINE_P = 0.15
"""Probability that a sentence is followed by a newline instead of a space."""
TRAIN_GRAMMAR_SEED = 0
"""The grammar seed of the training text (``TextBatches``)."""
HELDOUT_GRAMMAR_SEED = 1
"""The grammar seed of the held-out text (``heldout_windows``): the same grammar, other sentences."""
CORPUS_BYTES = 300_000
"""Default corpus length, the training text's: 300 steps of 8 x 1024 bytes read it ~8 times over."""


def generate_corpus(num_bytes: int = CORPUS_BYTES, seed: int = TRAIN_GRAMMAR_SEED) -> bytes:
    """ASCII text of at least ``num_bytes`` bytes from the grammar above; the same seed gives the same text."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < num_bytes:
        plural = rng.random() < _PLURAL_P
        subject = rng.choice(_PLURAL_SUBJECTS if plural else _SUBJECTS)
        verb = rng.choice(_VERBS)[1 if plural else 0]  # agreement: "the miller walks", "the children walk"
        sentence = f"{subject} {verb} {rng.choice(_OBJECTS)}"
        if rng.random() < _TIME_P:
            sentence += f" {rng.choice(_TIMES)}"
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(_ENDINGS)
        sentence += "\n" if rng.random() < _NEWLINE_P else " "
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts).encode("ascii")


def _entropy_bits(probabilities: list[float]) -> float:
    return -sum(p * math.log2(p) for p in probabilities if p > 0)


def _mean_len(strings: list[str]) -> float:
    return sum(map(len, strings)) / len(strings)


def grammar_entropy_bits_per_sentence() -> float:
    """Shannon entropy of one sentence of ``generate_corpus`` (its separator included), in bits: the sum of the
    entropies of its independent choices. Each choice can be read back from the text, so this is the text's."""
    subject = _PLURAL_P * math.log2(len(_PLURAL_SUBJECTS)) + (1 - _PLURAL_P) * math.log2(len(_SUBJECTS))
    endings = Counter(_ENDINGS)
    return (_entropy_bits([_PLURAL_P, 1 - _PLURAL_P]) + subject + math.log2(len(_VERBS)) + math.log2(len(_OBJECTS))
            + _entropy_bits([_TIME_P, 1 - _TIME_P]) + _TIME_P * math.log2(len(_TIMES))
            + _entropy_bits([n / len(_ENDINGS) for n in endings.values()])
            + _entropy_bits([_NEWLINE_P, 1 - _NEWLINE_P]))


def mean_sentence_bytes() -> float:
    """Expected length of one sentence of ``generate_corpus`` in bytes, its separator included."""
    verbs = _PLURAL_P * _mean_len([v[1] for v in _VERBS]) + (1 - _PLURAL_P) * _mean_len([v[0] for v in _VERBS])
    subject = _PLURAL_P * _mean_len(_PLURAL_SUBJECTS) + (1 - _PLURAL_P) * _mean_len(_SUBJECTS)
    return (subject + 1 + verbs + 1 + _mean_len(_OBJECTS) + _TIME_P * (1 + _mean_len(_TIMES))
            + _mean_len(_ENDINGS) + 1)


def grammar_entropy_nats_per_byte() -> float:
    """The corpus's entropy rate, the floor of any model's expected next-byte loss on text it has not memorised:
    bits per sentence / mean sentence bytes, in nats (sentences are independent and the text parses into them
    one way only, so the rate of the byte stream is the ratio). ~0.220 nats (0.317 bits) per byte."""
    return grammar_entropy_bits_per_sentence() / mean_sentence_bytes() * math.log(2)


def heldout_windows(count: int, seq_len: int, seed: int = HELDOUT_GRAMMAR_SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed held-out set: ``count`` windows of ``seq_len`` + 1 bytes at evenly spaced starts of the corpus of
    grammar ``seed`` (the first window at its start, the last ending at its end; the corpus is made long enough
    that the windows do not overlap), as inputs [count, seq_len] and next-byte targets [count, seq_len], int64
    on the CPU. The same arguments give the same tensors in every process."""
    if count < 1 or seq_len < 1:
        raise ValueError(f"heldout_windows: count {count}, seq_len {seq_len}; expected positive integers")
    window = seq_len + 1
    tokens = corpus_tokens(max(CORPUS_BYTES, count * window), seed)
    span = tokens.numel() - window
    starts = [span * i // (count - 1) if count > 1 else 0 for i in range(count)]
    windows = torch.stack([tokens[s:s + window] for s in starts])  # [count, seq_len + 1]
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


@cache
def corpus_tokens(num_bytes: int = CORPUS_BYTES, seed: int = TRAIN_GRAMMAR_SEED) -> torch.Tensor:
    """The corpus as int64 byte tokens [num_bytes'] (values 0..255), on the CPU."""
    return torch.frombuffer(bytearray(generate_corpus(num_bytes, seed)), dtype=torch.uint8).long()


@dataclass
class TextBatches:
    """Random windows of the corpus: inputs [micro_batch, seq_len] and next-byte targets of the same shape."""

    micro_batch: int
    seq_len: int
    device: torch.device
    seed: int = 0
    """Different ranks pass different seeds, so data-parallel ranks see different windows."""
    synthetic: bool = False
    """Uniform random tokens in [0, vocab_size) instead of the corpus (no learnable structure; for timing)."""
    vocab_size: int = 256

    def __post_init__(self):
        self._generator = torch.Generator().manual_seed(self.seed)
        self._tokens = corpus_tokens()
        if not self.synthetic and self.seq_len + 1 > self._tokens.numel():
            raise ValueError(f"seq_len {self.seq_len} is longer than the corpus ({self._tokens.numel()} bytes)")

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        b, s = self.micro_batch, self.seq_len
        if self.synthetic:
            window = torch.randint(0, self.vocab_size, (b, s + 1), generator=self._generator)
        else:
            starts = torch.randint(0, self._tokens.numel() - s - 1, (b,), generator=self._generator)
            window = torch.stack([self._tokens[i:i + s + 1] for i in starts.tolist()])  # [B, S + 1]
        window = window.to(self.device, non_blocking=True)
        return window[:, :-1], window[:, 1:]  # inputs, targets: [B, S]


@dataclass
class RecsysBatches:
    """Synthetic DLRM batches in the table-batched layout of ``dlrm.DLRM``: dense features [B, F], global row
    indices of every table's lookups (table t's rows start at the sum of the earlier tables' rows) with CSR
    offsets [T * B + 1] (bag t * B + b: sample b, table t; fixed pooling per table), and a click label with a
    learnable rule (a logistic function of two dense features and the parity of table 0's first index)."""

    micro_batch: int
    num_dense: int
    table_rows: tuple[int, ...]
    pooling: tuple[int, ...]
    device: torch.device
    seed: int = 0

    def __post_init__(self):
        self._generator = torch.Generator(device=self.device).manual_seed(self.seed)

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        b, g, dev = self.micro_batch, self._generator, self.device
        dense = torch.randn(b, self.num_dense, generator=g, device=dev)  # [B, F]
        indices, starts, row_base, lookup_base = [], [], 0, 0
        for rows, pool in zip(self.table_rows, self.pooling):
            indices.append(torch.randint(0, rows, (b * pool,), generator=g, device=dev) + row_base)  # [B * pool]
            starts.append(torch.arange(b, device=dev) * pool + lookup_base)  # [B] bag starts
            row_base += rows
            lookup_base += b * pool
        first = indices[0][:: self.pooling[0]]  # table 0's first lookup of each sample: [B]
        offsets = torch.cat([*starts, torch.tensor([lookup_base], device=dev)])  # [T * B + 1]
        logit = 2.0 * dense[:, 0] - 1.5 * dense[:, 1] + torch.where(first % 2 == 0, 1.0, -1.0)
        labels = (torch.rand(b, generator=g, device=dev) < torch.sigmoid(logit)).float()  # [B]
        return dense, torch.cat(indices), offsets, labels
