"""Kept for scripts that import it from ``benchmarks/`` (``train_repredict.py``): the kernel classes of a training
step now live in the package. The reading and the classification are ``workbench.trace``; the model's prediction in
the same classes and the report's classes table are ``workbench.train.profile_classes``. Pure Python (no torch).
"""

from __future__ import annotations

from workbench.trace import (  # noqa: F401 - re-exported for benchmarks/train_repredict.py
    CLASSES,
    DEVICE_CATEGORIES,
    HOST_CATEGORIES,
    OP_CATEGORIES,
    PHASES,
    DeviceEvent,
    attention_pass,
    busy_us,
    classify,
    kernel_rows,
    measured_by_class,
    model_op_class,
    phase_of,
    read_trace,
)
from workbench.train.profile_classes import class_rows, predicted_by_class  # noqa: F401 - re-exported
