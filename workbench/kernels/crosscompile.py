"""Compile a kernel config for GPUs that are not here: AMD gfx942 (MI300X/MI325X), gfx950 (MI350X/MI355X),
NVIDIA sm_90 (H100/H200) and sm_100 (B200), on the CPU, and read what the compiler says about it.

``inspect_config("gemm", config, "gfx942")`` builds the kernel with ``triton.compile`` for that target and
reports shared memory/LDS bytes, registers (VGPR/SGPR on AMD, from the amdgcn listing; per thread on NVIDIA,
from ``cuobjdump --dump-resource-usage`` of the cubin), spills, and the occupancy that follows. A config that
fits MI350X's 160 KiB LDS but not MI300X's 64 KiB is flagged by comparing the two targets.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from workbench.kernels._common import KernelInputError, interpreting

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
KERNELS = ("gemm", "attention")
_TRITON_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "tf32": "fp32"}


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


def _fp8_type(target: str) -> str:
    return "fp8e4b8" if target == "gfx942" else "fp8e4nv"  # e4m3fnuz on MI300-class, OCP e4m3 elsewhere


def _gemm_source(config: dict, dtype: str, target: str):
    from workbench.kernels.gemm import _gemm_kernel

    operand = _fp8_type(target) if dtype == "fp8" else _TRITON_DTYPE[dtype]
    out = "bf16" if dtype == "fp8" else _TRITON_DTYPE[dtype]
    signature = {"a_ptr": f"*{operand}", "b_ptr": f"*{operand}", "c_ptr": f"*{out}", "bias_ptr": f"*{out}",
                 "scale_a_ptr": "*fp32", "scale_b_ptr": "*fp32"}
    signature.update({name: "i32" for name in ("M", "N", "K", "M_LOAD", "N_LOAD", "stride_am", "stride_bk",
                                               "stride_cm")})
    scale = "tensor" if dtype == "fp8" else "none"
    precision = {"tf32": "tf32" if target != "gfx950" else "bf16x3", "fp32": "ieee"}.get(dtype)
    # Row-major operands: Triton specialises the unit inner strides to constants at run time, so do we here
    constexprs = dict(stride_ak=1, stride_bn=1, stride_cn=1, HAS_BIAS=False, ACTIVATION="none", SCALE_A=scale, SCALE_B=scale, UPCAST=False,
                      INPUT_PRECISION=precision, MAX_IMPRECISE_ACC=None, EVEN_K=True,
                      **dict.fromkeys(("DIV_M", "DIV_N", "DIV_K", "DIV_AM", "DIV_AK", "DIV_BK", "DIV_BN"), 1),
                      **{k: config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")},
                      SPLIT_K=config.get("SPLIT_K", 1))
    signature.update({name: "constexpr" for name in constexprs})
    signature = {name: signature[name] for name in _gemm_kernel.arg_names}  # the kernel's parameter order
    # sizes and outer strides divisible by 16, as Triton specialises them at run time
    divisible = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "M_LOAD", "N_LOAD", "stride_am", "stride_bk", "stride_cm"]
    return _gemm_kernel, signature, constexprs, divisible


def _attention_source(config: dict, dtype: str, target: str):
    from workbench.kernels.attention import _attn_fwd_kernel

    t = _TRITON_DTYPE[dtype]
    signature = {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "O": f"*{t}", "LSE": "*fp32"}
    strides = [f"stride_{x}{y}" for x in "qkvo" for y in "bhs"]
    signature.update({name: "i32" for name in (*strides, "seq_len", "heads_q", "group")})
    signature["qk_scale"] = "fp32"
    constexprs = dict(CAUSAL=True, HEAD_DIM=config.get("HEAD_DIM", 128), BLOCK_M=config["BLOCK_M"],
                      BLOCK_N=config["BLOCK_N"], TMA=config.get("TMA", False), UPCAST=False)
    signature.update({name: "constexpr" for name in constexprs})
    signature = {name: signature[name] for name in _attn_fwd_kernel.arg_names}
    divisible = ["Q", "K", "V", "O", "LSE", *strides, "seq_len"]
    return _attn_fwd_kernel, signature, constexprs, divisible


_SOURCES = {"gemm": _gemm_source, "attention": _attention_source}


def _options(config: dict, target: str) -> dict:
    options = {k: config[k] for k in ("num_warps", "num_stages") if k in config}
    if TARGETS[target].backend == "hip":
        options.update({k: config[k] for k in ("waves_per_eu", "matrix_instr_nonkdim", "kpack") if k in config})
        if target == "gfx950":
            options["kpack"] = 1  # the only value gfx950 accepts
    return options


def inspect_config(kernel: str, config: dict, target: str, dtype: str = "bf16") -> Inspection:
    """Compile one config of ``kernel`` for ``target`` on this machine and read its resource use."""
    if interpreting():
        raise KernelInputError("TRITON_INTERPRET: got 1, expected it unset: under the interpreter the kernels are "
                               "Python functions, not compilable ones (run with TRITON_INTERPRET=0)")
    if kernel not in _SOURCES:
        raise KernelInputError(f"kernel: got {kernel!r}, expected one of {', '.join(KERNELS)}")
    if target not in TARGETS:
        raise KernelInputError(f"target: got {target!r}, expected one of {', '.join(TARGETS)}")
    fn, signature, constexprs, divisible = _SOURCES[kernel](config, dtype, target)
    names = list(signature)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    base = Inspection(kernel, target, dtype, config)
    try:
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=TARGETS[target],
                                  options=_options(config, target))
    except Exception as exc:  # noqa: BLE001 - a config that does not compile is a result
        return _replace(base, error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}")
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


def inspect_space(kernel: str, configs: list[dict], targets=("gfx942", "gfx950", "sm_90"), dtype: str = "bf16"):
    """Inspect every config on every target; a config that fits gfx950 but not gfx942 is flagged."""
    results = [inspect_config(kernel, config, target, dtype) for config in configs for target in targets]
    by_config: dict[str, dict[str, Inspection]] = {}
    for r in results:
        by_config.setdefault(json.dumps(r.config, sort_keys=True), {})[r.target] = r
    flagged = [key for key, per in by_config.items()
               if "gfx950" in per and "gfx942" in per and per["gfx950"].fits and not per["gfx942"].fits]
    return results, flagged
