"""Training data for the reference job: a generated English-like text corpus (byte tokens) and synthetic
recommendation batches. Nothing is downloaded.

The corpus comes from a small deterministic grammar (seeded), so it has structure a model can learn -- spelling,
word order, agreement between a sentence's subject and verb -- and a loss curve on it means something: a byte
model starts near ln(vocab) and falls towards the grammar's entropy (roughly 1-1.5 nats per byte).
"""

from __future__ import annotations

import random
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


def generate_corpus(num_bytes: int = 300_000, seed: int = 0) -> bytes:
    """ASCII text of at least ``num_bytes`` bytes from the grammar above; the same seed gives the same text."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < num_bytes:
        plural = rng.random() < 0.35
        subject = rng.choice(_PLURAL_SUBJECTS if plural else _SUBJECTS)
        verb = rng.choice(_VERBS)[1 if plural else 0]  # agreement: "the miller walks", "the children walk"
        sentence = f"{subject} {verb} {rng.choice(_OBJECTS)}"
        if rng.random() < 0.5:
            sentence += f" {rng.choice(_TIMES)}"
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(_ENDINGS)
        sentence += "\n" if rng.random() < 0.15 else " "
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts).encode("ascii")


@cache
def corpus_tokens(num_bytes: int = 300_000, seed: int = 0) -> torch.Tensor:
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
