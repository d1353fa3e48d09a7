"""Operator graphs of a training step: ops (shapes, FLOPs, bytes) for transformers and recommenders."""
