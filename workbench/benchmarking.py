"""The shared harness of the benchmark scripts (``benchmarks/``): one timer, one environment record, one run folder.

- ``time_steps``: the median of N timed calls after a warm-up, each call bracketed by a device synchronize (host
  clock) or timed by CUDA events; what each call returned is kept (a training step's loss).
- ``environment``: what is needed to read a number later: Python, torch, CUDA, the GPU, its driver, power limit and
  top SM clock (``nvidia-smi``), package versions, the UTC date. No hostname.
- ``run_folder``: ``benchmarks/results/<gpu>/<area>/<run>/`` with its ``environment.json``; ``append_jsonl`` adds one
  result row to a ``.jsonl`` file there, ``read_jsonl`` reads one back (a resumed sweep), both through the bounded
  loader and the checks of ``workbench.fileio``.

Pure Python at import: torch is imported only by the functions that time or describe a GPU.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.fileio import TABLE_MAX_BYTES, InputFileError, OutputError, check_output, read_text, write_text

RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
"""Where result folders go in a checkout: ``benchmarks/results/``."""

NVIDIA_SMI_FIELDS = "driver_version,power.limit,clocks.max.sm"
"""What ``environment()["driver"]`` holds: nvidia-smi's line for these fields, e.g. ``570.133.20, 700.00 W, 1980 MHz``
(the power limit and top SM clock bound every measured time)."""


# --- timing ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    """``repeats`` timed calls of one function after its warm-up."""

    times_s: list[float]
    """Each timed call's seconds, sorted ascending."""
    warmup_s: float
    """Wall seconds of the warm-up calls, compilation and autotuning included, up to a synchronize after the last."""
    results: list[Any] = field(default_factory=list)
    """What each timed call returned, in call order."""

    @property
    def median_s(self) -> float:
        """The middle of the sorted times (of an even count, the upper one of the two middle times)."""
        return self.times_s[len(self.times_s) // 2]


def device_synchronize() -> Callable[[], None]:
    """``torch.cuda.synchronize`` where a GPU is visible, else a no-op (a CPU smoke run times the host)."""
    try:
        import torch
    except ImportError:
        return lambda: None
    return torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)


def time_steps(step: Callable[[int], Any], *, warmup: int, repeats: int, clock: str = "wall",
               synchronize: Callable[[], None] | None = None,
               after_warmup: Callable[[], None] | None = None) -> Timing:
    """Call ``step(i)`` ``warmup`` times, then ``repeats`` times timed; the median is ``Timing.median_s``.

    ``clock="wall"``: the host clock (``time.perf_counter``) between a synchronize before and after each call, so a
    call's time includes its launch overhead and every kernel it queued. ``clock="cuda"``: CUDA events recorded
    around each call on the current stream (device time, launch gaps inside the call included). ``synchronize``:
    default ``device_synchronize()``. ``after_warmup``: called once between the warm-up and the timed calls (e.g.
    ``torch.cuda.reset_peak_memory_stats``). ``i`` counts from 0 in the warm-up and again in the timed calls (the
    timed calls see the inputs the warm-up saw, in the same order)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"time_steps: warmup={warmup}, repeats={repeats}: expected warmup >= 0 and repeats >= 1")
    if clock not in ("wall", "cuda"):
        raise ValueError(f"time_steps: clock={clock!r}: expected 'wall' or 'cuda'")
    sync = synchronize or device_synchronize()
    start = time.perf_counter()
    for i in range(warmup):
        step(i)
    sync()
    warmup_s = time.perf_counter() - start
    if after_warmup is not None:
        after_warmup()
    times, results = [], []
    for i in range(repeats):
        if clock == "cuda":
            import torch

            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            results.append(step(i))
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)
        else:
            sync()
            began = time.perf_counter()
            results.append(step(i))
            sync()
            times.append(time.perf_counter() - began)
    return Timing(sorted(times), warmup_s, results)


def profile_kernels(step: Callable[[int], Any], steps: int, *, trace: str | None = None,
                    cpu: bool = False) -> list[dict]:
    """CUDA kernel time per kernel name over ``steps`` profiled calls of ``step(i)``, per step, largest first:
    ``[{"name", "calls", "us"}]``. ``trace``: also write the profiled steps' Kineto chrome trace there, gzipped
    (``trace + ".gz"``; the plain file is removed); ``cpu``: record the CPU side too (host ops in the trace)."""
    import gzip
    import shutil

    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if cpu else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
        with open(trace, "rb") as raw, gzip.open(trace + ".gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        os.remove(trace)
    out = []
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = event.self_cuda_time_total
        if device_us > 0:
            out.append({"name": event.key[:200], "calls": event.count / steps, "us": device_us / steps})
    return sorted(out, key=lambda k: -k["us"])


# --- environment -----------------------------------------------------------------------------------------------

def nvidia_smi(fields: str = NVIDIA_SMI_FIELDS) -> str | None:
    """nvidia-smi's CSV line for ``fields`` (first GPU), or None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def package_version(name: str) -> str | None:
    """``name.__version__`` if the package imports, else None."""
    try:
        return str(__import__(name).__version__)
    except Exception:  # noqa: BLE001 - an absent or broken package is recorded as absent
        return None


def environment(packages: Iterable[str] = ("triton",)) -> dict:
    """What a measured number depends on: ``python``, ``torch``, ``cuda``, ``gpu`` (the device name, None without
    one), ``date_utc``, one key per package of ``packages`` that imports (its version), ``ptxas`` with triton (the
    release it compiles with, ``ptxas_text``), and ``driver`` (nvidia-smi's
    ``NVIDIA_SMI_FIELDS`` line) where nvidia-smi runs. No hostname: result folders are committed."""
    try:
        import torch
    except ImportError:
        env = {"python": platform.python_version(), "torch": None, "cuda": None, "gpu": None}
    else:
        env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
               "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    env["date_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name in packages:
        version = package_version(name)
        if version is not None:
            env[name] = version
    ptxas = ptxas_text() if "triton" in packages else None
    if ptxas is not None:
        env["ptxas"] = ptxas
    driver = nvidia_smi()
    if driver is not None:
        env["driver"] = driver
    return env


def ptxas_text() -> str | None:
    """The ptxas release Triton compiles NVIDIA kernels with, "13.0" (``kernels._common.ptxas_release``: it sets
    which Gluon backward config=None runs), or None without one."""
    from workbench.kernels._common import ptxas_release

    release = ptxas_release()
    return None if release is None else f"{release[0]}.{release[1]}"


def gpu_folder(device_name: str | None, count: int = 1) -> str:
    """The results folder of a device: the catalog name without its form factor (``NVIDIA H200`` -> ``h200``),
    else the device name in lower case with runs of other characters as ``-``; ``cpu`` without a GPU; ``x<count>``
    appended for more than one GPU (``h200x2``)."""
    if not device_name:
        name = "cpu"
    else:
        from workbench.bench import match_catalog

        gpu = match_catalog(device_name)
        name = gpu.name.split("-")[0] if gpu else re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return f"{name}x{count}" if count > 1 else name


# --- run folders and rows --------------------------------------------------------------------------------------

def run_folder(area: str, run: str, *, gpu: str | None = None, root: str | os.PathLike | None = None,
               env: dict | None = None, overwrite: bool = False) -> Path:
    """``<root>/<gpu>/<area>/<run>/`` (root: ``RESULTS_DIR``; gpu: ``gpu_folder`` of this machine's first GPU),
    created, with ``environment.json``: ``env`` (default ``environment()``) and the command line. An existing
    ``environment.json`` is an error unless ``overwrite`` (a second run gets its own folder)."""
    for label, part in (("area", area), ("run", run)):
        if not part or "/" in part or part in (".", ".."):
            raise ValueError(f"run_folder: {label}={part!r}: expected one folder name (no '/')")
    env = dict(environment() if env is None else env)
    if gpu is None:
        gpu = gpu_folder(env.get("gpu"))
    folder = Path(root if root is not None else RESULTS_DIR) / gpu / area / run
    target = folder / "environment.json"
    check_output(target, overwrite=overwrite)
    env.setdefault("command", " ".join([Path(sys.executable).name, *sys.argv]))
    write_text(target, json.dumps(env, indent=2) + "\n", overwrite=overwrite)
    return folder


def append_jsonl(path: str | os.PathLike, row: dict) -> None:
    """Add ``row`` as one line to the JSON-lines file ``path`` (created with its folder), flushed to disk, so that a
    sweep killed after a row keeps it."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"cannot append to {path}: is a folder (expected a .jsonl file)")
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(row, default=str) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise OutputError(f"cannot append to {path}: {exc.strerror or exc} (expected a writable .jsonl file)") from None


def read_jsonl(path: str | os.PathLike, *, max_bytes: int = TABLE_MAX_BYTES) -> list[dict]:
    """The rows of a JSON-lines file (blank lines skipped); a line that is not a JSON object is an error naming it."""
    rows = []
    for number, line in enumerate(read_text(path, what="JSON-lines file", max_bytes=max_bytes).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"line {number}: {exc.msg}: expected one JSON object per line") from None
        if not isinstance(row, dict):
            raise InputFileError(path, f"line {number}: a {type(row).__name__}: expected one JSON object per line")
        rows.append(row)
    return rows


def measured_labels(path: str | os.PathLike, *, measured_key: str = "step_time_s") -> set[str]:
    """Labels of the rows of a sweep's JSON-lines file that were measured (carry ``measured_key``); an absent file
    has none. A sweep re-run with ``--only-missing`` skips these and appends the rest: the failed or skipped rows."""
    if not Path(path).exists():
        return set()
    return {row["label"] for row in read_jsonl(path) if measured_key in row and "label" in row}
