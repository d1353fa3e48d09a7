"""The generated corpus: unchanged by the held-out additions, its entropy floor, and the fixed held-out windows."""

import hashlib
import itertools
import math
from collections import Counter

import pytest
import torch

from workbench.train import data
from workbench.train.data import (
    generate_corpus,
    grammar_entropy_bits_per_sentence,
    grammar_entropy_nats_per_byte,
    heldout_windows,
    mean_sentence_bytes,
)


def test_training_corpus_is_the_one_earlier_runs_trained_on():
    assert hashlib.sha256(generate_corpus()).hexdigest().startswith("adb54971")  # grammar seed 0, 300 kB
    assert hashlib.sha256(generate_corpus(seed=1)).hexdigest().startswith("a31e2500")


def _sentences() -> Counter:
    """Every sentence the grammar can produce (separator included) with its probability, equal strings merged."""
    out = Counter()
    endings = Counter(data._ENDINGS)
    for plural, subjects in ((True, data._PLURAL_SUBJECTS), (False, data._SUBJECTS)):
        p_subject = (data._PLURAL_P if plural else 1 - data._PLURAL_P) / len(subjects)
        times = [(None, 1 - data._TIME_P)] + [(t, data._TIME_P / len(data._TIMES)) for t in data._TIMES]
        for subject, verb, obj, (time, p_time) in itertools.product(subjects, data._VERBS, data._OBJECTS, times):
            body = f"{subject} {verb[1 if plural else 0]} {obj}" + (f" {time}" if time else "")
            body = body[0].upper() + body[1:]
            p = p_subject / len(data._VERBS) / len(data._OBJECTS) * p_time
            for ending, count in endings.items():
                for sep, p_sep in (("\n", data._NEWLINE_P), (" ", 1 - data._NEWLINE_P)):
                    out[body + ending + sep] += p * count / len(data._ENDINGS) * p_sep
    return out


def test_entropy_floor_counts_the_grammar_choices_and_every_choice_is_readable_from_the_text():
    sentences = _sentences()  # enumerated: equal strings from different choices would merge and lower this
    assert sum(sentences.values()) == pytest.approx(1.0)
    exact_bits = -sum(p * math.log2(p) for p in sentences.values())
    assert grammar_entropy_bits_per_sentence() == pytest.approx(exact_bits, rel=1e-9)
    assert mean_sentence_bytes() == pytest.approx(sum(p * len(s) for s, p in sentences.items()), rel=1e-9)
    assert grammar_entropy_bits_per_sentence() == pytest.approx(17.253, abs=1e-3)
    assert grammar_entropy_nats_per_byte() == pytest.approx(0.2200, abs=1e-4)
    text = generate_corpus(1_000_000, seed=3)  # the generator's sentence length agrees with the formula
    assert len(text) / sum(text.count(c) for c in (b".", b"!")) == pytest.approx(mean_sentence_bytes(), rel=0.01)


def test_heldout_windows_are_fixed_evenly_spaced_slices_of_the_seed_1_corpus():
    inputs, targets = heldout_windows(5, 16)
    assert inputs.shape == targets.shape == (5, 16) and inputs.dtype == torch.int64
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # next-byte targets
    corpus = torch.frombuffer(bytearray(generate_corpus(seed=1)), dtype=torch.uint8).long()
    assert torch.equal(inputs[0], corpus[:16]) and torch.equal(targets[-1], corpus[-16:])  # first start, last end
    starts = [(corpus.numel() - 17) * i // 4 for i in range(5)]
    assert all(torch.equal(inputs[i], corpus[s:s + 16]) for i, s in enumerate(starts))
    again = heldout_windows(5, 16)
    assert torch.equal(again[0], inputs) and torch.equal(again[1], targets)
    train_corpus = torch.frombuffer(bytearray(generate_corpus()), dtype=torch.uint8).long()
    assert not torch.equal(inputs[2], train_corpus[starts[2]:starts[2] + 16])  # other text than training


def test_heldout_windows_do_not_overlap_when_they_outgrow_the_default_corpus():
    inputs, _ = heldout_windows(40, 8191)  # 40 x 8192 bytes > 300 kB: the corpus grows instead
    assert inputs.shape == (40, 8191)
    assert not torch.equal(inputs[0, :64], inputs[1, :64])
    inputs1, _ = heldout_windows(1, 8)
    assert torch.equal(inputs1[0], torch.frombuffer(bytearray(generate_corpus(seed=1)[:8]), dtype=torch.uint8).long())
    with pytest.raises(ValueError, match="count 0"):
        heldout_windows(0, 8)
