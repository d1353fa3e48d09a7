"""How much of a step's NCCL time the GPU spends on NCCL alone: interval arithmetic over a torch.profiler trace.

Pure Python (no torch import): ``benchmarks/train/multi_gpu_proof.py`` profiles a few steps on rank 0 and calls
``device_activity`` and ``nccl_overlap``; ``tests/train/test_multi_gpu_proof.py`` feeds them hand-made traces.

Per step, on one GPU:

- NCCL kernel time: the sum of the NCCL kernels' durations (what all collectives cost, hidden or not; two kernels
  on two streams at once count twice);
- NCCL busy time: the union of the NCCL kernels' intervals;
- exposed NCCL time: the part of that union no other device activity (a compute kernel, a memcpy, a memset, on any
  stream of the same GPU) overlaps -- the time the step would lose if the collectives were free, to first order.

A NCCL kernel's duration includes waiting for the slower rank to join, so skew between ranks reads as NCCL time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from workbench.trace import DEVICE_CATEGORIES  # kernel, gpu_memcpy, gpu_memset: device activity

NCCL = re.compile(r"nccl", re.IGNORECASE)
"""NCCL kernels' names: ``ncclDevKernel_AllGather_RING_LL(...)``, ``ncclKernel_ReduceScatter_...``."""

Interval = tuple[float, float]
COLLECTIVE_NAMES: tuple[tuple[str, re.Pattern], ...] = (
    ("all_gather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("all_reduce", re.compile(r"all_?reduce", re.IGNORECASE)),
)
"""``workbench.perf.comm`` collective names by NCCL kernel name; any other NCCL kernel is ``other``."""


def collective_of(name: str) -> str:
    """all_gather, reduce_scatter, all_reduce or other, from a NCCL kernel's name."""
    return next((collective for collective, pattern in COLLECTIVE_NAMES if pattern.search(name)), "other")


@dataclass(frozen=True)
class Activity:
    """One kernel, memcpy or memset of a trace."""

    name: str
    start_us: float
    duration_us: float
    device: str
    """The GPU it ran on (the trace's pid for device rows)."""
    stream: str

    @property
    def nccl(self) -> bool:
        return bool(NCCL.search(self.name))

    @property
    def interval(self) -> Interval:
        return self.start_us, self.start_us + self.duration_us


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of ``intervals`` as sorted, disjoint (start, end) pairs; empty and reversed ones are dropped."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def covered_length(intervals: Iterable[Interval]) -> float:
    """Length of the union of ``intervals``."""
    return sum(end - start for start, end in merge_intervals(intervals))


def uncovered_length(intervals: Iterable[Interval], cover: Iterable[Interval]) -> float:
    """Length of the union of ``intervals`` outside the union of ``cover``."""
    covers = merge_intervals(cover)
    total, j = 0.0, 0
    for start, end in merge_intervals(intervals):
        while j < len(covers) and covers[j][1] <= start:  # covers ending before this interval: done with them
            j += 1
        cursor, k = start, j
        while k < len(covers) and covers[k][0] < end:
            c_start, c_end = covers[k]
            total += max(0.0, min(c_start, end) - cursor)
            cursor = max(cursor, c_end)
            if cursor >= end:
                break
            k += 1
        total += max(0.0, end - cursor)
    return total


def device_activity(trace: dict | list) -> list[Activity]:
    """Every kernel, memcpy and memset of a chrome trace (``torch.profiler``'s ``export_chrome_trace``)."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    return [Activity(e["name"], float(e["ts"]), float(e.get("dur", 0.0)), str(e.get("pid")), str(e.get("tid")))
            for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]


def nccl_overlap(activity: list[Activity], steps: int) -> dict[str, float]:
    """Per step (``steps`` profiled), on the GPU that ran the most NCCL time: NCCL kernel time (sum), NCCL busy
    time (union), exposed NCCL time (union outside every other activity of that GPU), that GPU's busy time, and the
    NCCL kernel time per collective (``nccl_<collective>_ms``)."""
    if steps < 1:
        raise ValueError(f"steps = {steps}: expected the number of profiled steps (>= 1)")
    by_device: dict[str, list[Activity]] = {}
    for a in activity:
        by_device.setdefault(a.device, []).append(a)
    per_collective = {f"nccl_{c}_ms": 0.0 for c in (*(name for name, _ in COLLECTIVE_NAMES), "other")}
    if not by_device:
        return {"nccl_kernel_ms": 0.0, "nccl_busy_ms": 0.0, "nccl_exposed_ms": 0.0, "device_busy_ms": 0.0,
                "nccl_kernels": 0.0, **per_collective}
    device = max(by_device, key=lambda d: (sum(a.duration_us for a in by_device[d] if a.nccl),
                                           sum(a.duration_us for a in by_device[d])))
    events = by_device[device]
    nccl = [a.interval for a in events if a.nccl]
    other = [a.interval for a in events if not a.nccl]
    per_step_ms = 1e-3 / steps
    for a in events:
        if a.nccl:
            per_collective[f"nccl_{collective_of(a.name)}_ms"] += a.duration_us * per_step_ms
    return {
        "nccl_kernel_ms": sum(end - start for start, end in nccl) * per_step_ms,
        "nccl_busy_ms": covered_length(nccl) * per_step_ms,
        "nccl_exposed_ms": uncovered_length(nccl, other) * per_step_ms,
        "device_busy_ms": covered_length(a.interval for a in events) * per_step_ms,
        "nccl_kernels": len(nccl) / steps,
        **per_collective,
    }
