# Not an upstream file: a stand-in for generative_recommenders/ops/jagged_tensors.py, whose upstream version imports
# TorchRec (ops/pytorch/pt_jagged.py) and fbgemm_gpu. modules/stu.py imports these two only for inference KV
# caching (STULayer.update_kv_cache / construct_full_kv with kv_caching_lengths set), which a training step never
# reaches; see ../../VENDORED.md.
"""Inference-only jagged concat/split: not carried (a training step does not call them)."""

from __future__ import annotations


def concat_2D_jagged(*args, **kwargs):  # noqa: N802 -- upstream's name
    raise NotImplementedError("concat_2D_jagged is inference KV caching only; not vendored (VENDORED.md)")


def split_2D_jagged(*args, **kwargs):  # noqa: N802 -- upstream's name
    raise NotImplementedError("split_2D_jagged is inference KV caching only; not vendored (VENDORED.md)")
