"""The TMA persistent GEMM (workbench/kernels/gemm_tma.py) against the classic Triton GEMM (gemm.py) and the
vendor library (torch.matmul / torch._scaled_mm) on the Llama 3 8B/70B/405B projections, bf16 and fp8, on the
local sm_90+ GPU (issue #3: fp8 target >= 0.85 of _scaled_mm, geometric mean).

    python benchmarks/tma_gemm_bench.py --out $OUT/tma [--budget-s 210] [--fp8-accum slow|fast]

Shapes: M = 8192 tokens times each projection's weight (N, K derived from the model catalog as gemm.py's
bench cases do), kept when M, N, K >= 2048. bf16: A [M, K] row-major, B [K, N] row-major (gemm.py's bench
layout; --bf16-b col makes B column-major, the nn.Linear weight layout); fp8: A row-major, B column-major,
per-tensor fp32 scales, bf16 out (_scaled_mm's layout).

Per shape and dtype: every config of ``gemm_tma.config_space``, gemm.py's kernel on the first GEMM_PY_CONFIGS
entries of its sm_90 space (its default first), and the vendor call. Each candidate first runs once on fresh
random inputs into a NaN-poisoned output (a config that fails to compile or run is recorded with its error and
the run goes on); the output must be finite everywhere and within the relative Frobenius tolerance (bf16 2e-2,
fp8 5e-2) of an fp32 torch product on every 32nd row (so every output tile is checked) and of the vendor's
full output. Then ``triton.testing.do_bench`` (which also flushes the L2 before each call) times it, median,
rotating over enough input sets to exceed twice the 50 MB L2. Past --budget-s, remaining candidates are
recorded as skipped. Writes DIR/tma_gemm.csv (one row per candidate) and DIR/SUMMARY.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from workbench.kernels import cases, dispatch, gemm, gemm_tma  # noqa: E402

MODELS = ("llama3-8b", "llama3-70b", "llama3-405b")
TOKENS = 8192
MIN_DIM = 2048
L2_BYTES = 50 * 1024 * 1024
"""H200 L2 (50 MB, NVIDIA H100/H200 datasheets); the input sets rotate past twice this."""
MAX_INPUT_SETS = 4
GEMM_PY_CONFIGS = 3
"""gemm.py configs timed per shape: the head of its sm_90 space, whose first entry is the best single config
of the H200 sweep (spaces._NVIDIA_DEFAULTS)."""
CHECK_ROW_STRIDE = 32
"""Every 32nd output row is checked against an fp32 torch product: 4 rows in each 128-row tile."""
TOLERANCE = {"bf16": 2e-2, "fp8": 5e-2}


@dataclass
class Row:
    """One candidate on one shape: a CSV row."""

    model: str
    layer: str
    dtype: str
    m: int
    n: int
    k: int
    kernel: str
    """tma, gemm_py or vendor."""
    config: str
    """The config as sorted JSON ("" for the vendor)."""
    status: str = "ok"
    """ok, wrong (failed the check), error (compile/run failure) or skipped (budget)."""
    ms: float = math.nan
    tflops: float = math.nan
    vendor_ratio: float = math.nan
    """Vendor time / this time: > 1 is faster than the vendor."""
    error_vs_fp32: float = math.nan
    error_vs_vendor: float = math.nan
    first_call_s: float = math.nan
    """Wall time of the first call: compilation (cold Triton cache) plus one run."""
    detail: str = ""


@dataclass
class Case:
    model: str
    layer: str
    dtype: str
    m: int
    n: int
    k: int
    input_sets: list = field(default_factory=list)

    @property
    def flops(self) -> float:
        return gemm.flops(self.m, self.n, self.k)


def llama_shapes(models) -> list[tuple[str, str, int, int, int]]:
    """(model, layer, M, N, K) of the Llama projections with M, N, K >= MIN_DIM."""
    shapes = []
    for model in models:
        for layer, n, k in cases.llama_gemms(model):
            if min(TOKENS, n, k) >= MIN_DIM:
                shapes.append((model, layer, TOKENS, n, k))
    return shapes


def make_inputs(dtype: str, m: int, n: int, k: int, b_col_major: bool) -> tuple:
    """Fresh random operands: bf16 (a, b) or fp8 (a, b, scale_a, scale_b) with b column-major."""
    if dtype == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)  # a: [M, K] row-major
        b = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if b_col_major  # b: [K, N]
             else torch.randn(k, n, device="cuda", dtype=torch.bfloat16))
        return a, b
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)  # a: [M, K] row-major
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # b: [K, N] column-major
    scale_a = torch.rand((), device="cuda") + 0.5  # per-tensor fp32 scales
    scale_b = torch.rand((), device="cuda") + 0.5
    return a, b, scale_a, scale_b


def input_sets(dtype: str, m: int, n: int, k: int, b_col_major: bool) -> list[tuple]:
    operand = 1 if dtype == "fp8" else 2
    set_bytes = (m * k + k * n) * operand + m * n * 2
    count = min(MAX_INPUT_SETS, max(1, math.ceil(2 * L2_BYTES / set_bytes)))
    return [make_inputs(dtype, m, n, k, b_col_major) for _ in range(count)]


def fp32_reference_rows(dtype: str, inputs: tuple, rows: slice) -> torch.Tensor:
    """The product on the checked rows in fp32 (TF32 off), from the (dequantized) operands."""
    a, b = inputs[0][rows].float(), inputs[1].float()
    out = a @ b
    if dtype == "fp8":
        out = out * (inputs[2] * inputs[3])
    return out


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.float(), ref.float()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def vendor_call(dtype: str, fast_accum: bool):
    if dtype == "bf16":
        return lambda a, b: torch.matmul(a, b)
    return lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)


def gemm_py_call(dtype: str, config: dict, fast_accum: bool):
    if dtype == "bf16":
        return lambda a, b: dispatch.triton_matmul(a, b, config=config)
    return lambda a, b, sa, sb: dispatch.triton_scaled_matmul(a, b, sa, sb, config=config, use_fast_accum=fast_accum)


def tma_call(dtype: str, config: dict, fast_accum: bool):
    if dtype == "bf16":
        return lambda a, b, out=None: gemm_tma.matmul_tma(a, b, config, out=out)
    return lambda a, b, sa, sb, out=None: gemm_tma.scaled_matmul_tma(a, b, sa, sb, None, config,
                                                                      use_fast_accum=fast_accum, out=out)


def poisoned(m: int, n: int) -> torch.Tensor:
    return torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")


class Runner:
    def __init__(self, args):
        self.args = args
        self.start = time.monotonic()
        self.rows: list[Row] = []

    def over_budget(self) -> bool:
        return time.monotonic() - self.start > self.args.budget_s

    def measure(self, case: Case, kernel: str, config: dict | None, fn, takes_out: bool, vendor_out, ref_rows,
                rows_index, vendor_ms: float) -> Row:
        row = Row(case.model, case.layer, case.dtype, case.m, case.n, case.k, kernel,
                  json.dumps(config, sort_keys=True) if config else "")
        if self.over_budget():
            row.status, row.detail = "skipped", f"budget of {self.args.budget_s:.0f} s spent"
            return row
        try:
            first = case.input_sets[0]
            out_buffer = poisoned(case.m, case.n)
            if not takes_out:  # the caching allocator tends to hand this NaN block to the call's output
                del out_buffer
            t0 = time.monotonic()
            out = fn(*first, out=out_buffer) if takes_out else fn(*first)
            torch.cuda.synchronize()
            row.first_call_s = time.monotonic() - t0
            finite = bool(torch.isfinite(out).all())
            row.error_vs_fp32 = relative_error(out[rows_index], ref_rows)
            row.error_vs_vendor = relative_error(out, vendor_out) if vendor_out is not None else math.nan
            tol = TOLERANCE[case.dtype]
            if not finite or not row.error_vs_fp32 < tol or not (vendor_out is None or row.error_vs_vendor < tol):
                row.status = "wrong"
                row.detail = f"finite={finite}, tolerance {tol}"
                return row
            del out
            sets, turn = case.input_sets, [0]

            def call():
                turn[0] += 1
                return fn(*sets[turn[0] % len(sets)])

            row.ms = float(triton.testing.do_bench(call, warmup=self.args.warmup_ms, rep=self.args.rep_ms,
                                                   return_mode="median"))
            row.tflops = case.flops / row.ms * 1e-9
            row.vendor_ratio = vendor_ms / row.ms if vendor_ms == vendor_ms else math.nan
        except Exception as exc:  # noqa: BLE001 - a failing config is a result
            row.status = "error"
            lines = [line for line in str(exc).strip().splitlines() if line.strip()] or [repr(exc)]
            row.detail = f"{type(exc).__name__}: {lines[-1][:300]}"
            if self.args.verbose:
                traceback.print_exc()
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - a sticky CUDA error: later rows will say so
                pass
        return row

    def run_case(self, case: Case) -> None:
        fast = self.args.fp8_accum == "fast"
        rows_index = slice(None, None, CHECK_ROW_STRIDE)  # a view: fp8 tensors have no gather kernel
        ref_rows = fp32_reference_rows(case.dtype, case.input_sets[0], rows_index)
        vendor = vendor_call(case.dtype, fast)
        vendor_out = None
        try:
            vendor_out = vendor(*case.input_sets[0])
        except Exception as exc:  # noqa: BLE001
            print(f"  vendor failed: {exc}", flush=True)
        vendor_row = self.measure(case, "vendor", None, vendor, False, None, ref_rows, rows_index, math.nan)
        vendor_row.vendor_ratio = 1.0 if vendor_row.status == "ok" else math.nan
        rows = [vendor_row]
        vendor_ms = vendor_row.ms
        gemm_configs = gemm.config_space("cuda", dtype_bytes=1 if case.dtype == "fp8" else 2)[:GEMM_PY_CONFIGS]
        candidates = ([("gemm_py", gemm_configs[0], gemm_py_call(case.dtype, gemm_configs[0], fast), False)]
                      + [("tma", c, tma_call(case.dtype, c, fast), True) for c in gemm_tma.config_space(case.dtype)]
                      + [("gemm_py", c, gemm_py_call(case.dtype, c, fast), False) for c in gemm_configs[1:]])
        for kernel, config, fn, takes_out in candidates:
            rows.append(self.measure(case, kernel, config, fn, takes_out, vendor_out, ref_rows, rows_index,
                                     vendor_ms))
        self.rows.extend(rows)
        best = {kind: max((r for r in rows if r.kernel == kind and r.status == "ok"), key=lambda r: r.tflops,
                          default=None) for kind in ("tma", "gemm_py")}
        failed = sum(r.status in ("error", "wrong") for r in rows)
        print(f"{case.model} {case.layer} {case.dtype} {case.m}x{case.n}x{case.k}: vendor {vendor_row.tflops:.0f} "
              f"TFLOP/s; best tma {_ratio(best['tma'])}, best gemm.py {_ratio(best['gemm_py'])} of vendor; "
              f"{failed} failed; t={time.monotonic() - self.start:.0f}s", flush=True)


def _ratio(row: Row | None) -> str:
    return "n/a" if row is None else f"{row.vendor_ratio:.3f}"


def geomean(values) -> float:
    values = [v for v in values if v == v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def write_outputs(rows: list[Row], out_dir: Path, args, elapsed: float) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "tma_gemm.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Row.__dataclass_fields__))
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))
    (out_dir / "SUMMARY.md").write_text(summary(rows, args, elapsed))


def summary(rows: list[Row], args, elapsed: float) -> str:
    props = torch.cuda.get_device_properties(0)
    lines = ["# TMA persistent GEMM vs gemm.py vs vendor", "",
             f"{torch.cuda.get_device_name(0)} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs), "
             f"torch {torch.__version__}, triton {triton.__version__}; M = {TOKENS} tokens; fp8 accumulation: "
             f"{args.fp8_accum} (use_fast_accum={args.fp8_accum == 'fast'} on both sides); bf16 B "
             f"{'column' if args.bf16_b == 'col' else 'row'}-major; do_bench median (warmup {args.warmup_ms} ms, "
             f"rep {args.rep_ms} ms); {elapsed:.0f} s wall.", "",
             "Ratio = vendor time / kernel time (> 1: faster than torch.matmul / torch._scaled_mm).", ""]
    by_shape: dict[tuple, list[Row]] = {}
    for row in rows:
        by_shape.setdefault((row.dtype, row.model, row.layer, row.m, row.n, row.k), []).append(row)
    for dtype in ("bf16", "fp8"):
        shapes = {key: rs for key, rs in by_shape.items() if key[0] == dtype}
        if not shapes:
            continue
        best_tma = {key: _best(rs, "tma") for key, rs in shapes.items()}
        best_py = {key: _best(rs, "gemm_py") for key, rs in shapes.items()}
        tma_configs = sorted({r.config for rs in shapes.values() for r in rs if r.kernel == "tma"})
        per_config = {c: geomean(r.vendor_ratio for rs in shapes.values() for r in rs
                                 if r.kernel == "tma" and r.config == c and r.status == "ok") for c in tma_configs}
        complete = {c: g for c, g in per_config.items()
                    if all(any(r.config == c and r.status == "ok" for r in rs) for rs in shapes.values())}
        single = max(complete.items(), key=lambda item: item[1], default=(None, math.nan))
        lines += [f"## {dtype}", "",
                  f"- geometric mean ratio, best TMA config per shape: **{geomean(r.vendor_ratio for r in best_tma.values() if r):.3f}**",
                  f"- geometric mean ratio, best single TMA config over all shapes: {single[1]:.3f} (`{_short(single[0] or '')}`)",
                  f"- geometric mean ratio, gemm.py best of {GEMM_PY_CONFIGS} configs: "
                  f"{geomean(r.vendor_ratio for r in best_py.values() if r):.3f}",
                  f"- shapes measured: {sum(1 for r in best_tma.values() if r)} of {len(shapes)}", "",
                  "| model | layer | M x N x K | vendor TFLOP/s | best TMA | TMA config | gemm.py |",
                  "|---|---|---|---|---|---|---|"]
        for key, rs in shapes.items():
            vendor = next((r for r in rs if r.kernel == "vendor"), None)
            t, p = best_tma[key], best_py[key]
            lines.append(f"| {key[1]} | {key[2]} | {key[3]}x{key[4]}x{key[5]} | "
                         f"{vendor.tflops if vendor else math.nan:.0f} | {t.vendor_ratio if t else math.nan:.3f} | "
                         f"`{_short(t.config) if t else '-'}` | {p.vendor_ratio if p else math.nan:.3f} |")
        lines.append("")
        lines += ["Per TMA config (geometric mean ratio over the shapes it ran):", ""]
        lines += [f"- `{_short(c)}`: {g:.3f}" for c, g in sorted(per_config.items(), key=lambda item: -item[1]
                                                                    if item[1] == item[1] else 0)]
        lines.append("")
    failures = [r for r in rows if r.status in ("error", "wrong")]
    skipped = sum(r.status == "skipped" for r in rows)
    lines += ["## Failures", ""]
    seen = set()
    for r in failures:
        key = (r.kernel, r.dtype, r.config, r.detail)
        if key not in seen:
            seen.add(key)
            lines.append(f"- {r.kernel} {r.dtype} `{_short(r.config)}` ({r.status}): {r.detail}")
    if not failures:
        lines.append("- none")
    lines += ["", f"Skipped (budget): {skipped} candidates.", ""]
    return "\n".join(lines)


def _best(rows: list[Row], kernel: str) -> Row | None:
    return max((r for r in rows if r.kernel == kernel and r.status == "ok"), key=lambda r: r.vendor_ratio,
               default=None)


def _short(config: str) -> str:
    if not config:
        return ""
    c = json.loads(config)
    text = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']}"
    if "EPILOGUE_SUBTILE" in c:
        text += f" sub{c['EPILOGUE_SUBTILE']}{' ws' if c['WARP_SPECIALIZE'] else ''}"
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory (CSV + SUMMARY.md)")
    parser.add_argument("--budget-s", type=float, default=210.0,
                        help="stop starting new candidates after this many seconds (default 210)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dtypes", default="bf16,fp8")
    parser.add_argument("--fp8-accum", choices=("slow", "fast"), default="slow",
                        help="slow: use_fast_accum=False (promote every BLOCK_K; _scaled_mm's default); fast: True")
    parser.add_argument("--bf16-b", choices=("row", "col"), default="row", help="bf16 B layout")
    parser.add_argument("--warmup-ms", type=float, default=10.0)
    parser.add_argument("--rep-ms", type=float, default=60.0)
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of failing configs")
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        print("no GPU: this benchmark needs an sm_90+ NVIDIA GPU", file=sys.stderr)
        return 2
    if not gemm_tma.supported("cuda"):
        print(f"gemm_tma not supported here (capability {torch.cuda.get_device_capability()}, triton "
              f"{triton.__version__}): needs sm_90+ and triton >= 3.4", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 check product is IEEE
    runner = Runner(args)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}; "
          f"budget {args.budget_s:.0f} s", flush=True)
    dtypes = [d for d in args.dtypes.split(",") if d]
    torch.manual_seed(0)
    try:
        for model, layer, m, n, k in llama_shapes(args.models.split(",")):
            for dtype in dtypes:
                case = Case(model, layer, dtype, m, n, k)
                if runner.over_budget():  # no inputs to build: one row says the shape was skipped
                    runner.rows.append(Row(model, layer, dtype, m, n, k, "vendor", "", status="skipped",
                                           detail=f"budget of {args.budget_s:.0f} s spent"))
                    continue
                case.input_sets = input_sets(dtype, m, n, k, b_col_major=args.bf16_b == "col")
                runner.run_case(case)
                del case
                torch.cuda.empty_cache()
    finally:
        elapsed = time.monotonic() - runner.start
        write_outputs(runner.rows, args.out, args, elapsed)
        print(f"wrote {args.out / 'tma_gemm.csv'} and {args.out / 'SUMMARY.md'} ({elapsed:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
