"""Compile a kernel config for GPUs that are not here: AMD gfx942 (MI300X/MI325X), gfx950 (MI350X/MI355X),
NVIDIA sm_90 (H100/H200) and sm_100 (B200), on the CPU, and read what the compiler says about it.

``inspect_config("gemm", config, "gfx942")`` builds the kernel with ``triton.compile`` for that target and
reports shared memory/LDS bytes, registers (VGPR/SGPR on AMD, from the amdgcn listing; per thread on NVIDIA,
from ``cuobjdump --dump-resource-usage`` of the cubin), spills, and the occupancy that follows. A config that
fits MI350X's 160 KiB LDS but not MI300X's 64 KiB is flagged by comparing the two targets.

A service the kernels call: each kernel module says what to compile (``crosscompile_source``: its ``@triton.jit``
function, signature, constexprs and divisibility hints; ``KERNELS`` names the modules, imported on first use), and
this module compiles it (``compile_for``) and reads the result. It imports no kernel module.
"""

from __future__ import annotations

import importlib
import json
import math
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from workbench.kernels._common import KernelInputError, interpreting, undo_interpreter_patches

TARGETS: dict[str, GPUTarget] = {
    "gfx942": GPUTarget("hip", "gfx942", 64),
    "gfx950": GPUTarget("hip", "gfx950", 64),
    "sm_90": GPUTarget("cuda", 90, 32),
    "sm_100": GPUTarget("cuda", 100, 32),
}
SHARED_LIMIT_BYTES = {"gfx942": 64 * 1024, "gfx950": 160 * 1024, "sm_90": 227 * 1024, "sm_100": 227 * 1024}
"""Shared memory/LDS one workgroup may use (ROCm GPU specs table; CUDA programming guide, cc 9.0 and 10.0)."""
REGISTERS_PER_UNIT = {"gfx942": 512, "gfx950": 512, "sm_90": 65536, "sm_100": 65536}
"""AMD: VGPRs per SIMD lane (512 per SIMD, waves share them); NVIDIA: 32-bit registers per SM."""
MAX_WAVES_PER_SIMD = 8
"""CDNA3/CDNA4: at most 8 waves per SIMD (ROCm MI300 ISA guide)."""
MAX_WARPS_PER_SM = 64
KERNELS = {"gemm": "workbench.kernels.gemm", "attention": "workbench.kernels.attention"}
"""Kernel name -> the module whose ``crosscompile_source(config, dtype, target)`` says what to compile. The modules
register here by name and are imported on first use: this service imports no kernel at import time (the kernels
import it: ``gemm_tma.crosscompile`` and ``gemm_gluon.crosscompile`` build through it too)."""
TRITON_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "tf32": "fp32"}
"""Triton's type names of the 16- and 32-bit kernel dtypes (tf32 operands are fp32)."""


@dataclass(frozen=True)
class Inspection:
    kernel: str
    target: str
    dtype: str
    config: dict
    shared_bytes: int = 0
    registers: int = 0
    """VGPRs per lane (AMD) or registers per thread (NVIDIA)."""
    sgprs: int = 0
    spills: int = 0
    """Spilled registers (AMD: VGPR + SGPR spill count) or stack-frame bytes (NVIDIA: spills, local arrays)."""
    occupancy: int = 0
    """AMD: waves per SIMD; NVIDIA: warps per SM the registers and shared memory allow."""
    fits: bool = False
    error: str = ""

    def as_dict(self) -> dict:
        return {**asdict(self), "config": json.dumps(self.config, sort_keys=True)}


def triton_type(dtype: str, target: str) -> str:
    """Triton's name of a kernel dtype's operand type on ``target``: fp8 is e4m3fnuz on MI300-class GPUs (gfx942),
    OCP e4m3 elsewhere; tf32 operands are fp32."""
    if dtype == "fp8":
        return "fp8e4b8" if target == "gfx942" else "fp8e4nv"
    return TRITON_DTYPES[dtype]


class CompileSource(NamedTuple):
    """What a kernel module says to compile for one config (its ``crosscompile_source(config, dtype, target)``)."""

    fn: Any
    """The ``@triton.jit`` function."""
    signature: dict
    """Argument name -> Triton type ("*bf16", "i32", "constexpr"), in the kernel's parameter order."""
    constexprs: dict
    divisible: list
    """Arguments specialised as divisible by 16, as Triton does at run time for aligned sizes and pointers."""


def source_for(kernel, config: dict, dtype: str, target: str) -> CompileSource:
    """``kernel``'s compile source: a name of ``KERNELS`` (its module is imported now, not with this one) or any
    object with a ``crosscompile_source(config, dtype, target)`` method or function (a kernel module)."""
    if isinstance(kernel, str):
        if kernel not in KERNELS:
            raise KernelInputError(f"kernel: got {kernel!r}, expected one of {', '.join(KERNELS)}")
        kernel = importlib.import_module(KERNELS[kernel])
    return CompileSource(*kernel.crosscompile_source(config, dtype, target))


def _options(config: dict, target: str) -> dict:
    options = {k: config[k] for k in ("num_warps", "num_stages") if k in config}
    if TARGETS[target].backend == "hip":
        options.update({k: config[k] for k in ("waves_per_eu", "matrix_instr_nonkdim", "kpack") if k in config})
        if target == "gfx950":
            options["kpack"] = 1  # the only value gfx950 accepts
    return options


def inspect_config(kernel, config: dict, target: str, dtype: str = "bf16") -> Inspection:
    """Compile one config of ``kernel`` (a name of ``KERNELS``, or a kernel module with ``crosscompile_source``)
    for ``target`` on this machine and read its resource use."""
    if interpreting():
        raise KernelInputError("TRITON_INTERPRET: got 1, expected it unset: under the interpreter the kernels are "
                               "Python functions, not compilable ones (run with TRITON_INTERPRET=0)")
    if isinstance(kernel, str) and kernel not in KERNELS:
        raise KernelInputError(f"kernel: got {kernel!r}, expected one of {', '.join(KERNELS)}")
    if target not in TARGETS:
        raise KernelInputError(f"target: got {target!r}, expected one of {', '.join(TARGETS)}")
    source = source_for(kernel, config, dtype, target)
    name = kernel if isinstance(kernel, str) else kernel.__name__.rsplit(".", 1)[-1]
    base = Inspection(name, target, dtype, config)
    try:
        compiled = compile_for(target, source, _options(config, target))
    except Exception as exc:  # noqa: BLE001 - a config that does not compile is a result
        return failed(base, exc)
    shared = int(compiled.metadata.shared)
    warps = config.get("num_warps", 4)
    if TARGETS[target].backend == "hip":
        amdgcn = compiled.asm["amdgcn"]
        vgprs = _first_int(amdgcn, r"\.vgpr_count:\s+(\d+)")
        sgprs = _first_int(amdgcn, r"\.sgpr_count:\s+(\d+)")
        spills = _first_int(amdgcn, r"\.vgpr_spill_count:\s+(\d+)") + _first_int(amdgcn, r"\.sgpr_spill_count:\s+(\d+)")
        waves_by_vgpr = REGISTERS_PER_UNIT[target] // max(_round_up(vgprs, 16), 16)  # VGPRs allocate in 16s
        waves_by_lds = math.inf if shared == 0 else (SHARED_LIMIT_BYTES[target] // shared) * warps / 4
        occupancy = int(min(MAX_WAVES_PER_SIMD, waves_by_vgpr, waves_by_lds))
        return _replace(base, shared_bytes=shared, registers=vgprs, sgprs=sgprs, spills=spills, occupancy=occupancy,
                        fits=shared <= SHARED_LIMIT_BYTES[target] and spills == 0 and occupancy >= 1)
    registers, spill_bytes = _nvidia_resources(compiled.asm["cubin"])
    warps_by_regs = REGISTERS_PER_UNIT[target] // max(registers * 32, 1)
    warps_by_shared = math.inf if shared == 0 else (228 * 1024 // shared) * warps
    occupancy = int(min(MAX_WARPS_PER_SM, warps_by_regs // warps * warps, warps_by_shared))
    return _replace(base, shared_bytes=shared, registers=registers, spills=spill_bytes, occupancy=occupancy,
                    fits=shared <= SHARED_LIMIT_BYTES[target] and spill_bytes == 0 and occupancy >= warps)


def compile_for(target: str, source: CompileSource, options: dict):
    """``triton.compile`` of ``source`` for ``target`` (a key of ``TARGETS``) on this machine; raises what the
    compiler raises."""
    names = list(source.signature)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in source.divisible}
    undo_interpreter_patches()  # a CPU kernel run earlier in this process may have left some
    return triton.compile(ASTSource(source.fn, source.signature, source.constexprs, attrs), target=TARGETS[target],
                          options=options)


def failed(base: Inspection, exc: BaseException) -> Inspection:
    """The inspection of a config that did not compile: the compiler's last line as its error."""
    return _replace(base, error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}")


def _replace(base: Inspection, **changes) -> Inspection:
    return Inspection(**{**asdict(base), **changes})


def _round_up(x: int, granule: int) -> int:
    return -(-x // granule) * granule


def _first_int(text: str, pattern: str) -> int:
    match = re.search(pattern, text)
    return int(match.group(1)) if match else 0


def _nvidia_resources(cubin: bytes) -> tuple[int, int]:
    """(registers per thread, spill-store bytes) from cuobjdump's resource usage, as ptxas reports them."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    tool = str(tool) if tool.exists() else shutil.which("cuobjdump")
    if not tool:
        return 0, 0
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        out = subprocess.run([tool, "--dump-resource-usage", handle.name], capture_output=True, text=True,
                             timeout=60).stdout
    return _first_int(out, r"REG:(\d+)"), _first_int(out, r"STACK:(\d+)")


@dataclass(frozen=True)
class GluonBuild:
    """What ptxas made of one Hopper build of a Gluon kernel (``inspect_gluon_build``): ``gemm_gluon`` and
    ``attention_gluon`` check their shipped configs with it."""

    shared_bytes: int
    """Shared memory the kernel allocates (compiled metadata)."""
    registers: int
    """Registers per thread at launch (ptxas -v); a warp-specialized build re-divides them with setmaxnreg."""
    partition_registers: tuple[int, ...]
    """The N of every distinct ``setmaxnreg`` in the PTX (the partitions' register budgets; () without)."""
    spill_bytes: int
    """Spill-store bytes (ptxas -v): anything above 0 costs local-memory traffic in the main loop."""
    launched_warps: int
    """Warps per CTA (compiled metadata: the default partition's plus the workers')."""
    wait_groups: tuple[int, ...]
    """The N of every distinct ``wgmma.wait_group N`` in the PTX: an overlapped main loop shows 1."""
    ptxas_remarks: tuple[str, ...]
    """ptxas's (C75xx) wgmma remarks; C7514/C7515 ("serialized") mean it gave up the overlap."""

    @property
    def serialized(self) -> bool:
        return any("serialized" in remark for remark in self.ptxas_remarks)

    def as_dict(self) -> dict:
        return {**asdict(self), "serialized": self.serialized}


def inspect_gluon_build(kernel, timeout_s: float = 300) -> GluonBuild:
    """Read a compiled Hopper kernel (``triton.compile``'s result): its metadata, and Triton's bundled ptxas run
    again with -v on its PTX for registers, spills and wgmma remarks; no GPU needed."""
    ptx = kernel.asm["ptx"]
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    arch = re.search(r"\.target\s+(sm_\w+)", ptx).group(1)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "kernel.ptx").write_text(ptx)
        report = subprocess.run([str(ptxas), f"-arch={arch}", "-v", "kernel.ptx", "-o", "kernel.cubin"], cwd=tmp,
                                capture_output=True, text=True, timeout=timeout_s, check=False).stderr
    distinct = lambda pattern: tuple(sorted({int(n) for n in re.findall(pattern, ptx)}))  # noqa: E731
    return GluonBuild(
        shared_bytes=int(kernel.metadata.shared), registers=_first_int(report, r"Used (\d+) registers"),
        partition_registers=distinct(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)"),
        spill_bytes=_first_int(report, r"(\d+) bytes spill stores"), launched_warps=int(kernel.metadata.num_warps),
        wait_groups=distinct(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)"),
        ptxas_remarks=tuple(line.strip() for line in report.splitlines() if re.search(r"\(C75\d\d\)", line)))


def inspect_space(kernel: str, configs: list[dict], targets=("gfx942", "gfx950", "sm_90"), dtype: str = "bf16"):
    """Inspect every config on every target; a config that fits gfx950 but not gfx942 is flagged."""
    results = [inspect_config(kernel, config, target, dtype) for config in configs for target in targets]
    by_config: dict[str, dict[str, Inspection]] = {}
    for r in results:
        by_config.setdefault(json.dumps(r.config, sort_keys=True), {})[r.target] = r
    flagged = [key for key, per in by_config.items()
               if "gfx950" in per and "gfx942" in per and per["gfx950"].fits and not per["gfx942"].fits]
    return results, flagged
