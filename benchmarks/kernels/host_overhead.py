"""Host (CPU) cost of the kernel wrappers above a bare Triton launch of the same compiled kernel (issue 20).

    python3 benchmarks/kernels/host_overhead.py --out DIR                 # on a GPU
    python3 benchmarks/kernels/host_overhead.py --cpu --out DIR --label after [--tree PATH]   # no GPU

On a GPU, per kernel (bf16 GEMM gemm.py, its split-K and TMA, fp8 GEMM gemm.py / TMA / Gluon, flash attention
forward, and forward + backward through autograd, on the Triton and on the Gluon path): the wrapper is called once
with a recorder in place of the kernel objects, which keeps the exact launches it makes (kernel, grid, arguments);
the "bare" side replays those launches, ``kernel[grid](*args, **kwargs)``, on the same compiled kernel with the same
config. Both are then called N times back to back on tiny shapes (the GPU finishes each launch faster than the host
issues the next, so the loop is host-bound) and the host wall time per call is reported without the final
``torch.cuda.synchronize`` and with it; median of ROUNDS alternating rounds. The vendor calls (torch.matmul,
torch._scaled_mm, SDPA) are timed the same way for scale. Wrappers whose plans keep their kernels
(``_launch.KernelLaunch``: after the first launch they call the compiled kernel's launcher directly) are recorded at
that launch object; the bare side stays ``kernel[grid](...)``, Triton's own launch path, with the same arguments.
The forward + backward case is also timed against its recorded launches replayed inside a no-op autograd.Function
(forward launch in its forward, backward launches in its backward, on autograd's thread): what any autograd op that
launches these kernels pays, so the difference is the wrapper's own share.

With ``--cpu`` (no GPU needed) the kernel objects are replaced by no-op stubs and the wrapper runs on CPU tensors
in a simulated H200 environment (``_fake_h200``: the device checks accept the CPU, the device name is the H200's,
Gluon counts as runnable), so what is timed is the Python of the wrapper above the launch: argument checks,
config resolution (``workbench.select``), padding decisions, descriptors, allocation, and a direct launch's own
checks (a stub launch returns a stand-in compiled kernel whose launcher does nothing). The CPU mode times this
thread's CPU time and keeps the least of the rounds (the machine is shared: wall-clock medians there move by 2x). ``--tree PATH`` imports
``workbench`` from another checkout (e.g. a copy of the tree before a change), for before/after numbers.

On a GPU the report also lists the host time per call of each GEMM path as the selector's per-call pricing reads
it (``host_call_us.*`` in specs/efficiency.yaml, ``workbench/select/host.py``): copy those values there to calibrate
the picks to this machine.

Writes DIR/host_overhead.csv (one row per case, appended as it goes), DIR/host_overhead.md and
DIR/environment.json. Each case runs in its own try/except; ``--budget-s`` stops cleanly.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("mode", "label", "case", "kernel", "shape", "config", "launches", "calls", "wrapper_us", "bare_us",
          "overhead_us", "wrapper_sync_us", "bare_sync_us", "error")
KERNEL_NAMES = {  # module -> the @triton.jit / @gluon.jit objects its wrappers launch
    "gemm": ("_gemm_kernel", "_split_k_reduce_kernel"),
    "gemm_tma": ("_gemm_tma_kernel",),
    "gemm_gluon": ("_gemm_fp8_kernel",),
    "attention": ("_attn_fwd_kernel", "_attn_bwd_dq_kernel", "_attn_bwd_dkdv_kernel"),
    "attention_gluon_persistent": ("attn_fwd_persistent_kernel",),  # attention_gluon._persistent_kernel()'s
    "attention_gluon_bwd": ("_bwd_preprocess_kernel", "_attn_bwd_kernel", "_convert_kernel"),
}
TARGET_US = 15.0
"""Issue 20's target: a call costs at most this much host time above a bare launch of the same kernel."""
HOST_CALL_ROWS = {  # specs/efficiency.yaml's host_call_us.<key> (workbench/select/host.py) -> the row measuring it
    "gemm": "gemm bf16, gemm.py config",
    "gemm.fp8": "scaled_matmul fp8 row scales, gemm.py config",
    "gemm_split_k": "gemm bf16, gemm.py split-K config",
    "tma": "gemm bf16, TMA config",
    "tma.fp8": "scaled_matmul fp8 row scales, TMA config",
    "gluon": "scaled_matmul fp8 row scales, Gluon config",
    "vendor": "vendor for: gemm bf16, config=None (selector)",
    "vendor.fp8": "vendor for: scaled_matmul fp8 row scales, config=None (selector)",
}


# ------------------------------------------------------------------------------------------- kernel recorders
class _Launches:
    """Stands in for a kernel object: records each ``kernel[grid](...)`` and forwards it (to the real kernel on
    a GPU, to nothing with --cpu)."""

    def __init__(self, real, log: list, stub: bool):
        self.real, self.log, self.stub = real, log, stub
        self.arg_names = getattr(real, "arg_names", None)  # what a direct launch reads of its kernel
        self.params = getattr(real, "params", None)
        self.recording = False

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def _launch(self, grid, *args, **kwargs):
        if self.recording:
            self.log.append((self, grid, args, kwargs))
        if not self.stub:
            return self.real[grid](*args, **kwargs)
        return _STUB_COMPILED

    def bare(self, grid, args, kwargs):
        """The bare launch: the real kernel on a GPU, an empty call with --cpu."""
        if self.stub:
            return _noop(*args, **kwargs)
        return self.real[grid](*args, **kwargs)


def _noop(*args, **kwargs):
    return None


class _StubCompiled:
    """What a stubbed launch returns in place of Triton's CompiledKernel: a launcher that does nothing, so a
    wrapper that launches directly through the compiled kernel (``_launch.KernelLaunch``) takes that path."""

    run = staticmethod(_noop)
    function = None
    packed_metadata = None


_STUB_COMPILED = _StubCompiled()


def install_recorders(modules: dict, stub: bool) -> tuple[list, list]:
    """Recorders for every kernel object: with ``stub`` (--cpu) they replace the kernels for good; on a GPU they
    stand in only while ``record`` runs, so the timed wrapper calls the real kernel objects directly."""
    log, recorders = [], []
    for name, kernels in KERNEL_NAMES.items():
        module = modules.get(name)
        for kernel in kernels:
            if module is not None and hasattr(module, kernel):
                recorder = _Launches(getattr(module, kernel), log, stub)
                recorder.module, recorder.name = module, kernel
                if stub:
                    setattr(module, kernel, recorder)
                recorders.append(recorder)
    return log, recorders


def record(fn, log: list, recorders: list, launch_class=None) -> list:
    """The launches one call of ``fn`` makes, in order. ``launch_class`` (``_launch.KernelLaunch``): plans that hold
    their kernels and, after a first launch, call the compiled kernel directly never reach a recorder, so while
    recording its calls are logged as the launch ``kernel[grid](*tensors, *scalars, **kwargs)`` they stand for."""
    log.clear()
    by_kernel = {id(k): r for r in recorders for k in (r, r.real)}
    original = getattr(launch_class, "__call__", None)

    def logged(launch, aligned, *tensors):
        recorder = by_kernel.get(id(launch.kernel))
        if recorder is not None:
            log.append((recorder, launch.grid, (*tensors, *launch.scalars), launch.kwargs))
        for r in recorders:  # the JIT path below may reach a recorder: logged once, here
            r.recording = False
        try:
            return original(launch, aligned, *tensors)
        finally:
            for r in recorders:
                r.recording = True

    for r in recorders:
        r.recording = True
        setattr(r.module, r.name, r)
    if original is not None:
        launch_class.__call__ = logged
    try:
        fn()
    finally:
        if original is not None:
            launch_class.__call__ = original
        for r in recorders:
            r.recording = False
            if not r.stub:
                setattr(r.module, r.name, r.real)
    return list(log)


# -------------------------------------------------------------------------------------- simulated H200 (--cpu)
def _fake_h200(modules: dict) -> None:
    """Make the wrappers take their GPU path on CPU tensors: interpreting() False (so backend() is "cuda"),
    check_device accepting the CPU where it expects a GPU (the same operations otherwise), the H200's device
    name, 132 SMs, compute capability 9.0, Gluon runnable. Only module attributes are replaced."""
    import torch

    common = modules["_common"]
    real_check = common.check

    def check_device(*tensors, names):  # _common.check_device with "cpu" in place of "cuda"
        devices = {t.device for t in tensors}
        if len(devices) != 1:
            real_check(False, "device", ", ".join(f"{n} on {t.device}" for n, t in zip(names, tensors)),
                       "every tensor on the same device")
        device = devices.pop()
        real_check(device.type == "cpu", names[0], f"a tensor on {device}",
                   "GPU tensors (or set TRITON_INTERPRET=1 for the CPU)")

    device_name = functools.lru_cache(maxsize=16)(lambda index: "NVIDIA H200")
    sm_count = functools.lru_cache(maxsize=16)(lambda index: 132)
    capability = functools.lru_cache(maxsize=16)(lambda index: (9, 0))
    for module in modules.values():
        for name, value in (("interpreting", lambda: False), ("check_device", check_device),
                            ("device_name", device_name), ("sm_count", sm_count), ("capability", capability),
                            ("_sm_count", sm_count), ("_capability", capability)):  # the names before the layering
            if name in vars(module):
                setattr(module, name, value)
    launch = modules.get("_launch")
    if launch is not None:  # a direct launch asks for the current device and stream (Triton's driver: a GPU)
        launch.device_getters = lambda: ((lambda: 0), (lambda device: 0))
    gluon = modules.get("gemm_gluon")
    if gluon is not None:
        def supported(device=None):  # gemm_gluon.supported's steps, with the CPU as the Hopper GPU
            if not gluon.HAS_GLUON or gluon.interpreting() or torch.version.hip:
                return False
            device = torch.device("cpu") if device is None else torch.device(device)
            device_capability = vars(gluon).get("capability") or gluon._capability
            return device.type == "cpu" and device_capability(device.index or 0) == (9, 0)
        gluon.supported = supported
    tma = modules.get("gemm_tma")
    if tma is not None:
        tma.supported = lambda device=None: tma.TensorDescriptor is not None
    for name in ("attention_gluon", "attention_gluon_bwd"):  # the Gluon attention kernels' device checks
        module = modules.get(name)
        if module is not None and module.HAS_GLUON:
            module.check_gluon_device = lambda q: None
            module.supported = lambda device=None: True
    torch.cuda.current_device = lambda: None  # a CPU tensor's device index, which the Gluon launches compare


# ------------------------------------------------------------------------------------------------------ cases
def cases(modules: dict, device: str, gpu: bool) -> list[dict]:
    """(name, kernel, shape, config label, inputs -> wrapper call, vendor call or None) per case."""
    import torch

    gemm, tma, gluon, attention = (modules.get(n) for n in ("gemm", "gemm_tma", "gemm_gluon", "attention"))
    dispatch = modules["dispatch"]
    matmul, scaled_matmul = dispatch.triton_matmul, dispatch.triton_scaled_matmul  # the Triton GEMMs' front door
    backend = "cuda"
    m = n = k = 256
    bf16 = torch.bfloat16
    a = torch.randn(m, k, device=device, dtype=bf16)  # a: [M, K] row-major
    b = torch.randn(k, n, device=device, dtype=bf16)  # b: [K, N] row-major
    fp8 = torch.float8_e4m3fn
    a8 = torch.randn(m, k, device=device).to(fp8)  # a8: [M, K] row-major
    b8 = torch.randn(n, k, device=device).to(fp8).t()  # b8: [K, N] column-major, as _scaled_mm takes it
    sa = torch.rand(m, 1, device=device) + 0.5  # per-row scales, [M, 1] and [1, N]
    sb = torch.rand(1, n, device=device) + 0.5
    plain_bf16 = gemm.config_space(backend, dtype_bytes=2)[0]
    plain_fp8 = gemm.config_space(backend, dtype_bytes=1)[0]
    split_bf16 = dict(plain_bf16, SPLIT_K=2)  # two launches: the GEMM's K halves, then their sum
    shape = f"{m}x{n}x{k}"
    out = [
        dict(case="gemm bf16, config=None (selector)", kernel="gemm", shape=shape, config="None",
             call=lambda: matmul(a, b), vendor=lambda: torch.matmul(a, b)),
        dict(case="gemm bf16, gemm.py config", kernel="gemm", shape=shape, config=_label(plain_bf16),
             call=lambda: matmul(a, b, config=plain_bf16), vendor=None),
        dict(case="gemm bf16 + bias + relu, gemm.py config", kernel="gemm", shape=shape,
             config=_label(plain_bf16), call=lambda: matmul(a, b, bias=b[0], activation="relu",
                                                                 config=plain_bf16), vendor=None),
        dict(case="scaled_matmul fp8 row scales, config=None (selector)", kernel="gemm", shape=shape,
             config="None", call=lambda: scaled_matmul(a8, b8, sa, sb),
             vendor=lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=bf16)),
        dict(case="scaled_matmul fp8 row scales, gemm.py config", kernel="gemm", shape=shape,
             config=_label(plain_fp8), call=lambda: scaled_matmul(a8, b8, sa, sb, config=plain_fp8),
             vendor=None),
        dict(case="gemm bf16, gemm.py split-K config", kernel="gemm", shape=shape, config=_label(split_bf16),
             call=lambda: matmul(a, b, config=split_bf16), vendor=None),
    ]
    tma_ok = tma is not None and tma.supported(device if not gpu else "cuda")
    if tma_ok:
        tma_bf16 = next(c for c in tma.config_space("bf16") if not c["WARP_SPECIALIZE"])
        tma_fp8 = next(c for c in tma.config_space("fp8") if not c["WARP_SPECIALIZE"])
        out += [
            dict(case="gemm bf16, TMA config", kernel="gemm_tma", shape=shape, config=_label(tma_bf16),
                 call=lambda: matmul(a, b, config=tma_bf16), vendor=None),
            dict(case="scaled_matmul fp8 row scales, TMA config", kernel="gemm_tma", shape=shape,
                 config=_label(tma_fp8), call=lambda: scaled_matmul(a8, b8, sa, sb, config=tma_fp8),
                 vendor=None),
        ]
    if gluon is not None and gluon.supported(device if not gpu else "cuda"):
        gluon_fp8 = gluon.config_space("exact")[0]
        out.append(dict(case="scaled_matmul fp8 row scales, Gluon config", kernel="gemm_gluon", shape=shape,
                        config=_label(gluon_fp8), call=lambda: scaled_matmul(a8, b8, sa, sb, config=gluon_fp8),
                        vendor=None))
    if dispatch is not None:  # the vendor shim's front door (after issue 20's first slice): its cost above the
        # call it routes to (the vendor's or gemm's wrapper), not above a bare launch
        try:
            bf16_route = getattr(dispatch.choice_for(a, b), "choice", "triton")
            fp8_route = getattr(dispatch.choice_for(a8, b8, fp8=True), "choice", "triton")
        except Exception:  # noqa: BLE001 - the rule failing is the dispatch rows' problem, not the others'
            traceback.print_exc()
            bf16_route = fp8_route = "triton"
        out += [
            dict(case=f"dispatch.matmul bf16 (shim -> {bf16_route}), above that call", kernel="dispatch",
                 shape=shape, config="shim", call=lambda: dispatch.matmul(a, b), vendor=None,
                 bare=(lambda: torch.matmul(a, b)) if bf16_route == "vendor" else (lambda: matmul(a, b))),
            dict(case=f"dispatch.scaled_matmul fp8 (shim -> {fp8_route}), above that call", kernel="dispatch",
                 shape=shape, config="shim", call=lambda: dispatch.scaled_matmul(a8, b8, sa, sb), vendor=None,
                 bare=(lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=bf16)) if fp8_route == "vendor"
                 else (lambda: scaled_matmul(a8, b8, sa, sb))),
        ]
    bq, hq, hkv, s, d = 1, 4, 1, 128, 64
    q = torch.randn(bq, hq, s, d, device=device, dtype=bf16)  # q: [B, Hq, S, D]
    kk = torch.randn(bq, hkv, s, d, device=device, dtype=bf16)  # k, v: [B, Hkv, S, D]
    vv = torch.randn(bq, hkv, s, d, device=device, dtype=bf16)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, kk, vv))
    do = torch.randn_like(q)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    att_shape = f"b{bq} hq{hq} hkv{hkv} s{s} d{d} causal"

    fwd_bwd, sdpa_fwd_bwd = _fwd_bwd_calls(attention, qg, kg, vg, do)

    class _Floor(torch.autograd.Function):  # the same inputs and outputs through autograd, and nothing else
        @staticmethod
        def forward(ctx, q_, k_, v_):
            ctx.save_for_backward(q_, k_, v_)
            return torch.empty_like(q_)

        @staticmethod
        def backward(ctx, do_):
            q_, k_, v_ = ctx.saved_tensors
            return torch.empty_like(q_), torch.empty_like(k_), torch.empty_like(v_)

    def floor():
        o = _Floor.apply(qg, kg, vg)
        return torch.autograd.grad(o, (qg, kg, vg), do)

    o_saved, lse_saved = attention.flash_attention_fwd(q, kk, vv, causal=True)
    # one recorded graph each, replayed by backward-only calls (retain_graph): the autograd engine's hop to its
    # device thread and the backward wrapper there, apart from the forward
    o_graph = attention.flash_attention(qg, kg, vg, causal=True)
    o_floor_graph = _Floor.apply(qg, kg, vg)

    def bwd_only():
        return torch.autograd.grad(o_graph, (qg, kg, vg), do, retain_graph=True)

    def floor_bwd_only():
        return torch.autograd.grad(o_floor_graph, (qg, kg, vg), do, retain_graph=True)

    def replayed_through_autograd(launches: list):
        """fwd_bwd's recorded launches inside a no-op autograd.Function saving what the wrapper saves (q, k, v, o,
        lse): the forward kernel's launch in its forward, the others in its backward."""
        forward = [x for x in launches if x[0].name == "_attn_fwd_kernel"]
        backward = [x for x in launches if x[0].name != "_attn_fwd_kernel"]
        replay_forward, replay_backward = replayer(forward), replayer(backward)
        o_, lse_ = forward[0][2][3:5]  # _attn_fwd_kernel(Q, K, V, O, LSE, ...)

        class _Replayed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q_, k_, v_):
                replay_forward()
                ctx.save_for_backward(q_, k_, v_, o_, lse_)
                return torch.empty_like(q_)

            @staticmethod
            def backward(ctx, do_):
                q_, k_, v_, _, _ = ctx.saved_tensors
                replay_backward()
                return torch.empty_like(q_), torch.empty_like(k_), torch.empty_like(v_)

        def call():
            o = _Replayed.apply(qg, kg, vg)
            return torch.autograd.grad(o, (qg, kg, vg), do)
        return call

    # where the forward + backward overhead sits: the autograd.Function's forward alone (saves for backward, no
    # backward run), and the backward wrapper on this thread without autograd (its two launches: dQ with delta fused, dK/dV)
    out += [
        dict(case="flash_attention forward with grad (autograd.Function, no backward)", kernel="attention",
             shape=att_shape, config="None", call=lambda: attention.flash_attention(qg, kg, vg, causal=True),
             vendor=None),
        dict(case="flash_attention_bwd direct (no autograd)", kernel="attention", shape=att_shape, config="None",
             call=lambda: attention.flash_attention_bwd(do, q, kk, vv, o_saved, lse_saved, causal=True),
             vendor=None),
        dict(case="flash_attention backward only, through autograd (retained graph)", kernel="attention",
             shape=att_shape, config="None", call=bwd_only, vendor=None),
        dict(case="autograd floor, backward only (retained graph)", kernel="floor", shape=att_shape, config="",
             call=floor_bwd_only, vendor=None, bare=lambda: None),
    ]
    out += [
        dict(case="flash_attention forward (no grad)", kernel="attention", shape=att_shape, config="None",
             call=lambda: attention.flash_attention(q, kk, vv, causal=True),
             vendor=lambda: sdpa(q, kk, vv, is_causal=True, enable_gqa=True)),
        dict(case="flash_attention forward + backward (autograd)", kernel="attention", shape=att_shape,
             config="None", call=fwd_bwd, vendor=sdpa_fwd_bwd),
        dict(case="autograd floor: a no-op Function + torch.autograd.grad, same tensors", kernel="floor",
             shape=att_shape, config="", call=floor, vendor=None, bare=lambda: None),
        dict(case="bare launches through autograd: fwd_bwd's launches replayed in a no-op Function",
             kernel="floor+launches", shape=att_shape, config="None", call=fwd_bwd, vendor=None,
             make_call=replayed_through_autograd),
    ]
    out += gluon_attention_cases(modules, device)
    # the config=None calls and attention first: what a budget cut would cost least to lose comes last
    first = ("config=None", "flash_attention", "autograd floor", "bare launches through autograd")
    return sorted(out, key=lambda case: next((i for i, word in enumerate(first) if word in case["case"]), len(first)))


def _fwd_bwd_calls(attention, qg, kg, vg, do) -> tuple:
    """(ours, SDPA's) causal forward + backward through autograd on these inputs, as the attention rows time them."""
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def fwd_bwd():
        o = attention.flash_attention(qg, kg, vg, causal=True)
        return torch.autograd.grad(o, (qg, kg, vg), do)

    def sdpa_fwd_bwd():
        o = sdpa(qg, kg, vg, is_causal=True, enable_gqa=True)
        return torch.autograd.grad(o, (qg, kg, vg), do)
    return fwd_bwd, sdpa_fwd_bwd


def gluon_attention_cases(modules: dict, device: str) -> list[dict]:
    """flash_attention's Gluon path (sm_90, config=None: the persistent forward, the Gluon backward with its GQA
    split; one forward and three backward launches): forward + backward through autograd against SDPA, where
    config=None takes it for MQA d128 causal on 128 tokens (none where this Triton has no Gluon)."""
    import torch

    attention, gluon, gluon_bwd = (modules.get(n) for n in ("attention", "attention_gluon", "attention_gluon_bwd"))
    if gluon is None or gluon_bwd is None or not gluon.HAS_GLUON:
        return []
    b, hq, hkv, s, d = 1, 4, 1, 128, 128
    q, do = (torch.randn(b, hq, s, d, device=device, dtype=torch.bfloat16) for _ in range(2))  # [B, Hq, S, D]
    k, v = (torch.randn(b, hkv, s, d, device=device, dtype=torch.bfloat16) for _ in range(2))  # [B, Hkv, S, D]
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    fwd_bwd, sdpa_fwd_bwd = _fwd_bwd_calls(attention, qg, kg, vg, do)
    return [dict(case="flash_attention forward + backward (autograd), Gluon path", kernel="attention_gluon",
                 shape=f"b{b} hq{hq} hkv{hkv} s{s} d{d} causal", config="None", call=fwd_bwd, vendor=sdpa_fwd_bwd)]


def _label(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


# ----------------------------------------------------------------------------------------------------- timing
def _loop(fn, calls: int, sync, clock=time.perf_counter_ns) -> tuple[float, float]:
    """(host us per call without the final sync, with it) for ``calls`` back-to-back calls."""
    sync()
    start = clock()
    for _ in range(calls):
        fn()
    issued = clock()
    sync()
    done = clock()
    return (issued - start) / calls / 1e3, (done - start) / calls / 1e3


def time_pair(wrapper, bare, calls: int, rounds: int, sync, cpu: bool = False) -> dict:
    """Alternating rounds of the wrapper and the bare launches; medians of the per-call host times (wall clock).
    ``cpu`` (--cpu, stubbed launches on a shared machine): the least of the rounds' CPU times of this thread
    (``time.thread_time_ns``; autograd runs CPU backwards on the calling thread), which time spent descheduled by
    other processes does not inflate."""
    samples = {"wrapper": [], "bare": [], "wrapper_sync": [], "bare_sync": []}
    clock, pick = (time.thread_time_ns, min) if cpu else (time.perf_counter_ns, statistics.median)
    for _ in range(rounds):
        for name, fn in (("wrapper", wrapper), ("bare", bare)):
            host, synced = _loop(fn, calls, sync, clock)
            samples[name].append(host)
            samples[f"{name}_sync"].append(synced)
    return {key: pick(values) for key, values in samples.items()}


def replayer(launches: list):
    """One call that re-issues the recorded launches, ``kernel[grid](*args, **kwargs)`` each."""
    def bare():
        for recorder, grid, args, kwargs in launches:
            recorder.bare(grid, args, kwargs)
    return bare


# ------------------------------------------------------------------------------------------------------- main
def load_modules(tree: Path | None, cpu: bool) -> dict:
    if cpu:
        os.environ["TRITON_INTERPRET"] = "0"  # real kernel objects (stubbed below), the GPU code path
    sys.path.insert(0, str(tree or ROOT))
    import importlib

    modules = {"_common": importlib.import_module("workbench.kernels._common")}
    for name in ("gemm", "gemm_tma", "gemm_gluon", "attention", "dispatch", "checks", "_tiling", "_launch",
                 "attention_gluon", "attention_gluon_bwd", "attention_gluon_persistent"):
        try:
            modules[name] = importlib.import_module(f"workbench.kernels.{name}")
        except ImportError:
            pass  # dispatch.py exists only after issue 20's first slice, checks.py and _tiling.py after its
            # layering, _launch.py after the attention and TMA wrappers' direct launches
    return modules


def environment(cpu: bool, tree: Path | None, modules: dict) -> dict:
    import torch
    import triton

    env = {"mode": "cpu (stubbed launches)" if cpu else "gpu", "torch": torch.__version__,
           "triton": triton.__version__, "python": platform.python_version(), "processor": platform.processor(),
           "machine": platform.machine(), "cpu_count": os.cpu_count(), "host": platform.node(),
           "workbench": str(Path(modules["_common"].__file__).resolve().parents[2]), "tree": str(tree or ROOT),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)}
    try:
        env["load_average"] = os.getloadavg()
    except OSError:
        pass
    if not cpu:
        env.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda, hip=torch.version.hip)
    return env


def write_markdown(rows: list[dict], env: dict, path: Path) -> None:
    lines = [f"# Host overhead of the kernel wrappers ({env['mode']})", "",
             f"{env['date_utc']}; torch {env['torch']}, triton {env['triton']}, python {env['python']}"
             + (f", {env['gpu']}" if env.get("gpu")
                else f", {env.get('cpu_count')} CPUs, load {env.get('load_average')}"),
             f"`{env['command']}`", "",
             "Per call, microseconds of host wall time: the wrapper, the bare launch(es) of the same compiled kernel "
             "with the same arguments, and their difference (target: <= %.0f us). `*_sync` include the final "
             "`torch.cuda.synchronize` of the loop divided over its calls. Dispatch rows compare the shim with the "
             "call it routes to; the autograd floor is what any autograd.Function with these tensors costs "
             "(the forward + backward row's overhead above it and its three launches is the wrapper's own; the "
             "'bare launches through autograd' row replays those launches inside a no-op Function)."
             % TARGET_US, "",
             "| case | kernel | launches | wrapper us | bare us | overhead us | wrapper+sync us | bare+sync us | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['kernel']} | {r['launches']} | {r['wrapper_us']} | {r['bare_us']} | "
                     f"{r['overhead_us']} | {r['wrapper_sync_us']} | {r['bare_sync_us']} | {r['error']} |")
    def timed(prefix: str):
        return next((r for r in rows if r["case"].startswith(prefix) and r.get("wrapper_us")), None)

    for what, row, floor in (("Forward + backward", timed("flash_attention forward + backward"),
                              timed("autograd floor: a no-op")),
                             ("Backward only (retained graph)", timed("flash_attention backward only"),
                              timed("autograd floor, backward only"))):
        if row is not None and floor is not None:
            own = float(row["wrapper_us"]) - float(floor["wrapper_us"]) - float(row["bare_us"])
            lines += ["", f"{what} through autograd, the wrapper's own share: {own:.2f} us per call "
                      "(the row's wrapper time minus its autograd floor minus its bare launches)."]
    if env["mode"] == "gpu":  # what the selector's per-call pricing reads (the CPU mode's launches are stubs)
        measured = {key: timed(case) for key, case in HOST_CALL_ROWS.items()}
        values = ", ".join(f"`host_call_us.{key}` {row['wrapper_us']}" for key, row in measured.items() if row)
        lines += ["", "Host us per call for the selector (specs/efficiency.yaml, `host_call_us.*`, "
                  f"workbench/select/host.py; the wrapper column of the rows above): {values}."]
    row, replayed = timed("flash_attention forward + backward"), timed("bare launches through autograd")
    if row is not None and replayed is not None:
        own = float(row["wrapper_us"]) - float(replayed["wrapper_us"])
        lines += ["", f"Forward + backward through autograd above the same launches replayed through autograd: "
                  f"{own:.2f} us per call (target: <= {TARGET_US:.0f} us; the replay's own cost above the floor and "
                  "the bare launches is what autograd's thread adds to any Triton launch)."]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="stubbed launches on CPU tensors (no GPU needed)")
    parser.add_argument("--tree", type=Path, default=None, help="import workbench from this checkout")
    parser.add_argument("--label", default="", help="a label for the rows (e.g. before / after)")
    parser.add_argument("--calls", type=int, default=None, help="calls per round (default 2000 GPU, 2000 CPU)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    modules = load_modules(args.tree, args.cpu)
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("no GPU: run with --cpu for the stubbed-launch Python overhead", file=sys.stderr)
        return 2
    if args.cpu:
        _fake_h200(modules)
    log, recorders = install_recorders(modules, stub=args.cpu)
    device = "cpu" if args.cpu else "cuda"
    sync = (lambda: None) if args.cpu else torch.cuda.synchronize
    calls = args.calls or 2000
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment(args.cpu, args.tree, modules)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    csv_path = args.out / "host_overhead.csv"
    new = not csv_path.exists()
    rows = []
    with csv_path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        try:
            all_cases = cases(modules, device, gpu=not args.cpu)
        except Exception:  # noqa: BLE001 - nothing to time without inputs
            traceback.print_exc()
            return 1
        for case in all_cases:
            if time.monotonic() - started > args.budget_s:
                print(f"budget of {args.budget_s:.0f} s spent: stopping before {case['case']}", flush=True)
                break
            row = dict(mode="cpu" if args.cpu else "gpu", label=args.label, case=case["case"],
                       kernel=case["kernel"], shape=case["shape"], config=case["config"], calls=calls)
            case_rows = [row]
            try:
                case["call"]()  # compiles, fills the wrapper's caches
                sync()
                launches = record(case["call"], log, recorders, getattr(modules.get("_launch"), "KernelLaunch", None))
                row["launches"] = len(launches)
                bare = case.get("bare") or replayer(launches)
                call = case["make_call"](launches) if "make_call" in case else case["call"]
                call()
                sync()
                times = time_pair(call, bare, calls, args.rounds, sync, cpu=args.cpu)
                row.update(wrapper_us=f"{times['wrapper']:.2f}", bare_us=f"{times['bare']:.2f}",
                           overhead_us=f"{times['wrapper'] - times['bare']:.2f}",
                           wrapper_sync_us=f"{times['wrapper_sync']:.2f}", bare_sync_us=f"{times['bare_sync']:.2f}")
                if case["vendor"] is not None and not args.cpu:
                    vendor = time_pair(case["vendor"], case["vendor"], calls, 1, sync)
                    case_rows.append(dict(row, case=f"vendor for: {case['case']}", kernel="vendor", config="",
                                          launches="", wrapper_us=f"{vendor['wrapper']:.2f}", bare_us="",
                                          overhead_us="", wrapper_sync_us=f"{vendor['wrapper_sync']:.2f}",
                                          bare_sync_us=""))
            except Exception as exc:  # noqa: BLE001 - one failing case is a result, not the end of the run
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                traceback.print_exc()
                try:
                    sync()
                except Exception:  # noqa: BLE001
                    pass
            for r in case_rows:
                writer.writerow({key: r.get(key, "") for key in FIELDS})
                print(f"{r['case'][:60]:60s} wrapper {r.get('wrapper_us', '-'):>8} us  "
                      f"bare {r.get('bare_us', '-'):>8} us  overhead {r.get('overhead_us', '-'):>8} us "
                      f"{r.get('error', '')}", flush=True)
            handle.flush()
            rows += case_rows
            # rewritten after every case, so a run stopped from outside still leaves its table
            write_markdown([{key: r.get(key, "") for key in FIELDS} for r in rows], env, args.out / "host_overhead.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
