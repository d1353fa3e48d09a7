"""REPORT.md of a ``benchmarks/kernels/broad_shapes.py`` run, from its CSVs alone (pure Python: runs on a CPU
without torch).

    python3 benchmarks/kernels/broad_shapes.py --report DIR     # or: python3 benchmarks/kernels/broad_report.py DIR

Speed ratio = vendor time / our time (1.0: as fast as the vendor library; above 1: faster). Shim regret = the
shim's time / the faster of ours and the vendor's (1.0: it picked the faster). Geometric means throughout. The
shim's fit/test split of the shape ids lives beside the shapes (``benchmarks/kernels/shim_fit_split.json``); the
scripts pass its path.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

GEMM_FIELDS = ["id", "family", "name", "dtype", "m", "n", "k", "layout", "scaling", "sets", "ours_kernel",
               "ours_config", "ours_ms", "vendor_ms", "shim_ms", "shim_choice", "pred_triton_ms", "pred_vendor_ms",
               "shim_source", "vendor_takes", "vendor_aligned", "rel_err_ours", "rel_err_shim", "ours_host_us",
               "ours_burst_us", "vendor_host_us", "vendor_burst_us", "flops", "error"]
ATTENTION_FIELDS = ["id", "name", "pass_", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "fa3",
                    "ours_ms", "sdpa_ms", "sdpa_backend", "sdpa_flash_ms", "sdpa_cudnn_ms", "sdpa_efficient_ms",
                    "rel_err", "flops", "error"]
VENDOR_MIN_MS = 0.020
"""Issue 20's GEMM target counts shapes where the vendor call takes at least 20 us."""
TARGETS = {"gemm_min": 0.90, "gemm_geomean": 0.97, "shim_regret": 1.03, "fwd": 0.95, "fwd_bwd": 0.85,
           "attention_min": 0.75}
FA3_H100 = [
    # (id in ../shared/reference/published/kernel_throughput.csv, pass, batch, seq, heads, head_dim, causal, TFLOP/s)
    ("FA3fig-H100-fwd-d128-e275-FA3-2k", "fwd", 8, 2048, 16, 128, False, 625.0),
    ("TB-H100-fa3-fwd-2048", "fwd", 8, 2048, 16, 128, False, 565.544),
    ("FA3fig-H100-bwd-d128-FA3-4k", "bwd", 4, 4096, 16, 128, False, 542.0),
    ("FA3fig-H100-fwd-d128-4ec6-FA3-8k", "fwd", 2, 8192, 16, 128, True, 602.0),
    ("FA3fig-H100-fwd-d128-4ec6-FA3-16k", "fwd", 1, 16384, 16, 128, True, 616.0),
]
FA3_SOURCE = ("FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608), H100 80GB SXM5, bf16, 16 heads of 128, 16k "
              "tokens per batch: the paper's figures as transcribed in ../shared/reference/published/"
              "kernel_throughput.csv (confidence medium: the causal flag of the forward panels is inferred), and "
              "tritonbench's flash_v3 row (pytorch/benchmark commit ff65cb67, TB-H100-fa3-fwd-2048). Copied here.")


# ------------------------------------------------------------------------------------------------ reading
def _float(value) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def ratio(row: dict, ours: str = "ours_ms", vendor: str = "vendor_ms") -> float | None:
    o, v = _float(row.get(ours)), _float(row.get(vendor))
    return v / o if o and v else None


def best_ms(row: dict) -> float | None:
    times = [t for t in (_float(row.get("ours_ms")), _float(row.get("vendor_ms"))) if t]
    return min(times) if times else None


def regret(row: dict, chosen_ms: float | None = None) -> float | None:
    chosen = _float(row.get("shim_ms")) if chosen_ms is None else chosen_ms
    best = best_ms(row)
    return chosen / best if chosen and best else None


def _fmt(value, digits: int = 3) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ms(row: dict, key: str) -> str:
    value = _float(row.get(key))
    return "" if value is None else f"{value:.4f}"


# ------------------------------------------------------------------------------------------------- lines
def gemm_line(row: dict) -> str:
    r = ratio(row)
    return (f"{row.get('id', '')} {row.get('dtype', ''):4s} {row.get('m')}x{row.get('n')}x{row.get('k')} "
            f"{row.get('layout', '')} ours {_ms(row, 'ours_ms') or '-'} ms ({row.get('ours_kernel', '')}) vendor "
            f"{_ms(row, 'vendor_ms') or '-'} ms ratio {_fmt(r, 2) or '-'} shim {row.get('shim_choice', '-')} "
            f"{_ms(row, 'shim_ms') or '-'} ms {row.get('error', '')}").strip()


def attention_line(row: dict) -> str:
    return (f"{row.get('id', '')} {row.get('pass_', ''):7s} b{row.get('batch')} s{row.get('seq')} "
            f"hq{row.get('heads_q')}/{row.get('heads_kv')} d{row.get('head_dim')} "
            f"{'causal' if str(row.get('causal')) == '1' else 'full'} ours {_ms(row, 'ours_ms') or '-'} ms sdpa "
            f"{_ms(row, 'sdpa_ms') or '-'} ms ({row.get('sdpa_backend', '')}) ratio "
            f"{_fmt(ratio(row, vendor='sdpa_ms'), 2) or '-'} {row.get('error', '')}").strip()


# ----------------------------------------------------------------------------------------- the shim's rule
def rule_choice(row: dict, margin: float | None, min_dim: int) -> str | None:
    """What a shim rule would pick for a measured row: margin None = always the vendor (where it runs),
    margin -1 = always Triton; else Triton iff the vendor refuses the shape, or Triton is predicted faster by
    ``margin`` and every dimension is >= ``min_dim`` (or the vendor's operands are unaligned)."""
    has_ours, has_vendor = _float(row.get("ours_ms")) is not None, _float(row.get("vendor_ms")) is not None
    if not (has_ours or has_vendor):
        return None
    if not has_vendor or str(row.get("vendor_takes")) == "0":
        return "triton" if has_ours else None
    if margin is None or not has_ours:
        return "vendor"
    if margin < 0:
        return "triton"
    pred_t, pred_v = _float(row.get("pred_triton_ms")), _float(row.get("pred_vendor_ms"))
    if pred_t is None or pred_v is None:
        return "vendor"
    big = min(int(row["m"]), int(row["n"]), int(row["k"])) >= min_dim or str(row.get("vendor_aligned")) == "0"
    return "triton" if pred_t < pred_v * (1 - margin) and big else "vendor"


def load_split(path: Path) -> dict[str, set[str]] | None:
    """{"fit": ids, "test": ids} from ``shim_fit_split.json``, or None without one. Bounded read (1 MiB); a file
    that is not the expected JSON raises ValueError naming the file and what it lacks.

    The split holds the fit/test halves of the GEMM shape ids for choosing the shim's rule (written before any rule
    was fitted on it): choose VENDOR_MARGIN / TRITON_MIN_DIM on the fit ids; the test ids' regret is the honest
    figure."""
    path = Path(path)
    if not path.exists():
        return None
    if path.stat().st_size > 1 << 20:
        raise ValueError(f"{path}: got {path.stat().st_size} bytes, expected a small JSON file (at most 1 MiB)")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not (isinstance(doc, dict) and all(isinstance(doc.get(key), list) for key in ("fit", "test"))):
        raise ValueError(f"{path}: expected a JSON object with 'fit' and 'test' lists of shape ids")
    fit, test = set(map(str, doc["fit"])), set(map(str, doc["test"]))
    if fit & test:
        raise ValueError(f"{path}: ids in both halves: {sorted(fit & test)[:5]}")
    return {"fit": fit, "test": test}


def rule_table(rows: list[dict], split: dict[str, set[str]] | None = None) -> list[str]:
    """Per candidate rule: regret per dtype, over all rows, worst, Triton picks; with ``split`` also the regret
    (bf16 and fp8 together) over the fit ids and over the test ids apart."""
    rules = [("vendor library always", None, 0), ("Triton always", -1.0, 0)]
    rules += [(f"model, margin {m:.2f}, every dim >= {d}", m, d) for m in (0.0, 0.05, 0.10, 0.20)
              for d in (0, 1024, 2048, 4096)]
    halves = "| regret fit | regret test " if split else ""
    lines = [f"| rule | regret bf16 | regret fp8 | regret all {halves}| worst | Triton picks |",
             "|---|---|---|---|" + ("---|---|" if split else "") + "---|---|"]
    for label, margin, min_dim in rules:
        per = {"bf16": [], "fp8": []}
        by_half = {"fit": [], "test": []}
        picks, worst = 0, None
        for row in rows:
            choice = rule_choice(row, margin, min_dim)
            if choice is None or best_ms(row) is None:
                continue
            chosen = _float(row["ours_ms"] if choice == "triton" else row["vendor_ms"])
            value = regret(row, chosen)
            per.setdefault(row["dtype"], []).append(value)
            for half, ids in (split or {}).items():
                if row.get("id") in ids:
                    by_half[half].append(value)
            picks += choice == "triton"
            worst = value if worst is None or (value or 0) > worst else worst
        every = per["bf16"] + per["fp8"]
        halves = f"{_fmt(geomean(by_half['fit']))} | {_fmt(geomean(by_half['test']))} | " if split else ""
        lines.append(f"| {label} | {_fmt(geomean(per['bf16']))} | {_fmt(geomean(per['fp8']))} | "
                     f"{_fmt(geomean(every))} | {halves}{_fmt(worst)} | {picks}/{len(every)} |")
    return lines


# ------------------------------------------------------------------------------------------------ report
def _target(measured, goal: float, above: bool = True) -> str:
    if measured is None:
        return "not measured"
    met = measured >= goal if above else measured <= goal
    return f"{measured:.3f} ({'met' if met else 'missed'}; target {'>=' if above else '<='} {goal})"


def forward_target_rows(entries: list[dict], split: dict, choices) -> list[str]:
    """The forward targets' table rows of the attention sweeps (``benchmarks/kernels/attention_*_bench.py``): per
    (title, key) of ``choices`` and per half (test, fit, all: ``split``'s ids), the geometric mean and minimum of
    the entries' ``{key}_ratio`` against issue 20's forward targets, and how many shapes were timed."""
    lines = []
    for title, key in choices:
        for half in ("test", "fit", "all"):
            values = [e[f"{key}_ratio"] for e in entries if half == "all" or e["id"] in split[half]]
            measured = [x for x in values if x]
            lines.append(f"| {title} | {half} | {_target(geomean(measured), TARGETS['fwd'])} | "
                         f"{_target(min(measured, default=None), TARGETS['attention_min'])} | "
                         f"{len(measured)}/{len(values)} |")
    return lines


def summarize(gemm: list[dict], attention: list[dict]) -> dict:
    out = {}
    for dtype in ("bf16", "fp8"):
        rows = [r for r in gemm if r.get("dtype") == dtype]
        ratios = [ratio(r) for r in rows]
        counted = [r for r in rows if (_float(r.get("vendor_ms")) or 0) >= VENDOR_MIN_MS and ratio(r)]
        below = [r for r in counted if ratio(r) < TARGETS["gemm_min"]]
        regrets = [regret(r) for r in rows]
        out[dtype] = dict(cases=len(rows), timed=len([x for x in ratios if x]), geomean=geomean(ratios),
                          counted=len(counted), min_counted=min((ratio(r) for r in counted), default=None),
                          below=below, regret=geomean(regrets),
                          worst_regret=max((x for x in regrets if x), default=None))
    for pass_ in ("fwd", "fwd_bwd"):
        ratios = [ratio(r, vendor="sdpa_ms") for r in attention if r.get("pass_") == pass_]
        out[pass_] = dict(cases=len(ratios), geomean=geomean(ratios), min=min((x for x in ratios if x), default=None))
    return out


def write_report(folder: Path, split_path: Path | None) -> str:
    """Write folder/REPORT.md from folder/gemm.csv, attention.csv and environment.json, with the shim's fit/test
    regret from ``split_path`` (``load_split``; None or a missing file: no split); return the summary."""
    folder = Path(folder)
    gemm, attention = read_csv(folder / "gemm.csv"), read_csv(folder / "attention.csv")
    env_path = folder / "environment.json"
    env = json.loads(env_path.read_text()) if env_path.exists() else {}
    s = summarize(gemm, attention)
    lines = [f"# Triton kernels against the vendor library on a broad shape set ({env.get('gpu', 'unknown GPU')})", "",
             f"One run of `{env.get('command', 'benchmarks/kernels/broad_shapes.py')}` ({env.get('date_utc', '')}; "
             f"torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, driver {env.get('driver', '?')}; "
             f"{env.get('timing', '')}). Shapes: `benchmarks/kernels/shapes.yaml`. Speed ratio = vendor time / "
             "ours (above 1: ours faster); shim regret = the shim's time / the faster of the two. GEMM ours = "
             "`dispatch.triton_matmul` / `dispatch.triton_scaled_matmul` with config=None (the selector's pick: gemm.py, TMA or Gluon); "
             "vendor = `torch.matmul` / `torch._scaled_mm` (fp8 with per-row scales, exact accumulation); shim = "
             "`workbench.kernels.dispatch`. Attention vendor = the fastest of SDPA's flash, cuDNN and "
             "memory-efficient backends.", ""]
    if env.get("dry_run"):
        lines += ["**Dry run**: CPU tensors under TRITON_INTERPRET=1 on tiny stand-in shapes; every time below is a "
                  "code-path check, not a measurement.", ""]
    lines += ["## Targets (issue 20)", "", "| target | measured | cases |", "|---|---|---|"]
    for dtype, vendor in (("bf16", "torch.matmul"), ("fp8", "torch._scaled_mm")):
        d = s[dtype]
        lines.append(f"| GEMM {dtype} >= 0.90 of {vendor} where it takes >= 20 us (minimum) | "
                     f"{_target(d['min_counted'], TARGETS['gemm_min'])} | {d['counted']} ({len(d['below'])} below) |")
        lines.append(f"| GEMM {dtype} geometric mean >= 0.97 | {_target(d['geomean'], TARGETS['gemm_geomean'])} | "
                     f"{d['timed']} of {d['cases']} |")
        lines.append(f"| shim regret {dtype} <= 1.03 (geometric mean; worst {_fmt(d['worst_regret'])}) | "
                     f"{_target(d['regret'], TARGETS['shim_regret'], above=False)} | {d['cases']} |")
    both = [regret(r) for r in gemm]
    lines.append(f"| shim regret, bf16 and fp8 together | {_target(geomean(both), TARGETS['shim_regret'], False)} | "
                 f"{len([x for x in both if x])} |")
    for pass_, goal in (("fwd", TARGETS["fwd"]), ("fwd_bwd", TARGETS["fwd_bwd"])):
        d = s[pass_]
        lines.append(f"| attention {pass_} >= {goal} of the best SDPA (geometric mean) | {_target(d['geomean'], goal)}"
                     f" | {d['cases']} |")
        lines.append(f"| attention {pass_}: no shape below 0.75 (minimum) | "
                     f"{_target(d['min'], TARGETS['attention_min'])} | {d['cases']} |")
    lines += ["", "## GEMMs below 0.90 of the vendor library (vendor >= 20 us), and what the shim does there", "",
              "| id | family | name | dtype | m x n x k | ours ms | vendor ms | ratio | shim picks | shim regret |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for dtype in ("bf16", "fp8"):
        for r in s[dtype]["below"]:
            lines.append(f"| {r['id']} | {r['family']} | {r['name']} | {dtype} | {r['m']}x{r['n']}x{r['k']} | "
                         f"{_ms(r, 'ours_ms')} | {_ms(r, 'vendor_ms')} | {_fmt(ratio(r))} | {r.get('shim_choice', '')} "
                         f"| {_fmt(regret(r))} |")
    lines += ["", "## Where the shim runs the vendor library", ""]
    for dtype in ("bf16", "fp8"):
        vendor = [f"{r['id']} {r['name']} ({r['m']}x{r['n']}x{r['k']})" for r in gemm
                  if r.get("dtype") == dtype and r.get("shim_choice") == "vendor"]
        triton = [r["id"] for r in gemm if r.get("dtype") == dtype and r.get("shim_choice") == "triton"]
        lines.append(f"- {dtype}: the vendor library on {len(vendor)} shapes ({'; '.join(vendor) or 'none'}); "
                     f"Triton on {len(triton)} ({', '.join(triton) or 'none'}).")
    lines += ["", "## The shim's rule against these measurements", "",
              "What each rule would have picked on every measured case (from the two predictions kept in gemm.csv "
              "and the measured times; the shim as configured is `model, margin 0.10, every dim >= 2048`: "
              "`workbench.select.VENDOR_MARGIN`, `workbench.kernels.dispatch.TRITON_MIN_DIM`). Calibrate those two "
              "constants on the fit half of `benchmarks/kernels/shim_fit_split.json` (regret fit) and judge the "
              "choice on the test half (regret test).", ""] + rule_table(gemm, load_split(split_path) if split_path is not None else None)
    host_bound = [f"{r['id']} {r['dtype']}" for r in gemm if _float(r.get("ours_host_us"))
                  and _float(r.get("ours_burst_us")) and _float(r["ours_host_us"]) >= 0.9 * _float(r["ours_burst_us"])]
    listed = f" ({', '.join(host_bound[:20])})" if host_bound else ""
    lines += ["", f"Host-bound in a back-to-back burst (host time per call >= 0.9 x GPU time per call): "
              f"{len(host_bound)} of {len(gemm)} GEMM cases{listed}.", ""]
    lines += ["## Every GEMM case", "",
              "| id | family | name | dtype | m x n x k | layout | ours kernel | ours ms | vendor ms | ratio | TFLOP/s ours"
              " | shim | shim ms | regret | predicted triton / vendor ms | host us ours / vendor | rel. err | error |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in gemm:
        flops, ours = _float(r.get("flops")), _float(r.get("ours_ms"))
        tflops = flops / ours / 1e9 if flops and ours else None
        lines.append(f"| {r['id']} | {r.get('family', '')} | {r.get('name', '')} | {r.get('dtype', '')} | "
                     f"{r.get('m')}x{r.get('n')}x{r.get('k')} | {r.get('layout', '')} | {r.get('ours_config', '')} | "
                     f"{_ms(r, 'ours_ms')} | {_ms(r, 'vendor_ms')} | {_fmt(ratio(r))} | {_fmt(tflops, 0)} | "
                     f"{r.get('shim_choice', '')} | {_ms(r, 'shim_ms')} | {_fmt(regret(r))} | "
                     f"{_ms(r, 'pred_triton_ms')} / {_ms(r, 'pred_vendor_ms')} | "
                     f"{_fmt(_float(r.get('ours_host_us')), 1)} / {_fmt(_float(r.get('vendor_host_us')), 1)} | "
                     f"{_fmt(_float(r.get('rel_err_ours')), 4)} | {r.get('error', '')} |")
    lines += ["", "## Attention", "",
              "| id | name | pass | b | s | hq/hkv | d | causal | ours ms | best SDPA ms | backend | flash / cudnn / "
              "efficient ms | ratio | TFLOP/s ours | TFLOP/s SDPA | rel. err | error |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in attention:
        flops = _float(r.get("flops"))
        ours, sdpa = _float(r.get("ours_ms")), _float(r.get("sdpa_ms"))
        lines.append(f"| {r['id']} | {r.get('name', '')} | {r.get('pass_', '')} | {r.get('batch', '')} | {r.get('seq', '')}"
                     f" | {r.get('heads_q', '')}/{r.get('heads_kv', '')} | {r.get('head_dim', '')} | {r.get('causal', '')}"
                     f" | {_ms(r, 'ours_ms')} | {_ms(r, 'sdpa_ms')} | {r.get('sdpa_backend', '')} | "
                     f"{_ms(r, 'sdpa_flash_ms')} / {_ms(r, 'sdpa_cudnn_ms')} / {_ms(r, 'sdpa_efficient_ms')} | "
                     f"{_fmt(ratio(r, vendor='sdpa_ms'))} | {_fmt(flops / ours / 1e9 if flops and ours else None, 0)} | "
                     f"{_fmt(flops / sdpa / 1e9 if flops and sdpa else None, 0)} | {_fmt(_float(r.get('rel_err')), 4)} | "
                     f"{r.get('error', '')} |")
    lines += ["", "## FlashAttention-3's published H100 figures next to ours", "", FA3_SOURCE, "",
              "Ours and the best SDPA backend on the same shapes, this run. The backward figure is the backward "
              "pass alone: ours is derived as (fwd+bwd time - fwd time) against 2.5x the forward FLOPs. The H200 "
              "has the H100's tensor cores and clocks (989 dense bf16 TFLOP/s) with more HBM bandwidth.", "",
              "| published id | pass | b x s, heads x d, causal | FA3 on H100 TFLOP/s | ours TFLOP/s | best SDPA "
              "TFLOP/s (backend) |", "|---|---|---|---|---|---|"]
    for pid, pass_, b, seq, heads, d, causal, value in FA3_H100:
        ours_t, sdpa_t, backend = _fa3_match(attention, pass_, b, seq, heads, d, causal)
        lines.append(f"| {pid} | {pass_} | {b} x {seq}, {heads} x {d}, {'causal' if causal else 'full'} | {value:.0f} | "
                     f"{_fmt(ours_t, 0) or 'not in this run'} | {_fmt(sdpa_t, 0)} {f'({backend})' if backend else ''} |")
    errors = [r for r in gemm + attention if r.get("error")]
    if errors:
        lines += ["", "## Errors and refusals", ""]
        lines += [f"- {r['id']} {r.get('dtype', r.get('pass_', ''))}: {r['error']}" for r in errors]
    (folder / "REPORT.md").write_text("\n".join(lines) + "\n")
    return summary_table(s, geomean(both))


def _fa3_match(attention: list[dict], pass_: str, b: int, seq: int, heads: int, d: int, causal: bool):
    """(our TFLOP/s, SDPA's, its backend) on the row of the same shape, or Nones."""
    def find(p):
        for r in attention:
            if (r.get("pass_") == p and str(r.get("batch")) == str(b) and str(r.get("seq")) == str(seq)
                    and str(r.get("heads_q")) == str(heads) and str(r.get("heads_kv")) == str(heads)
                    and str(r.get("head_dim")) == str(d) and str(r.get("causal")) == str(int(causal))):
                return r
        return None
    if pass_ == "fwd":
        r = find("fwd")
        if r is None:
            return None, None, ""
        flops, ours, sdpa = _float(r.get("flops")), _float(r.get("ours_ms")), _float(r.get("sdpa_ms"))
        return (flops / ours / 1e9 if flops and ours else None, flops / sdpa / 1e9 if flops and sdpa else None,
                r.get("sdpa_backend", ""))
    fwd, both = find("fwd"), find("fwd_bwd")
    if fwd is None or both is None:
        return None, None, ""
    fwd_flops = _float(fwd.get("flops"))

    def bwd_tflops(key):
        f, t = _float(fwd.get(key)), _float(both.get(key))
        return 2.5 * fwd_flops / (t - f) / 1e9 if fwd_flops and f and t and t > f else None
    return bwd_tflops("ours_ms"), bwd_tflops("sdpa_ms"), both.get("sdpa_backend", "")


def summary_table(s: dict, regret_all: float | None) -> str:
    rows = [("GEMM bf16 geomean ratio", s["bf16"]["geomean"], s["bf16"]["timed"]),
            ("GEMM bf16 min ratio (vendor >= 20 us)", s["bf16"]["min_counted"], s["bf16"]["counted"]),
            ("GEMM fp8 geomean ratio", s["fp8"]["geomean"], s["fp8"]["timed"]),
            ("GEMM fp8 min ratio (vendor >= 20 us)", s["fp8"]["min_counted"], s["fp8"]["counted"]),
            ("shim regret bf16 / fp8 / all", None, None),
            ("attention fwd geomean / min", s["fwd"]["geomean"], s["fwd"]["cases"]),
            ("attention fwd+bwd geomean / min", s["fwd_bwd"]["geomean"], s["fwd_bwd"]["cases"])]
    out = ["", "summary                                   value      cases"]
    for label, value, cases in rows:
        if label.startswith("shim"):
            text = " / ".join(_fmt(x) or "-" for x in (s["bf16"]["regret"], s["fp8"]["regret"], regret_all))
            out.append(f"{label:40s}  {text}")
        elif label.startswith("attention"):
            key = "fwd" if "fwd+bwd" not in label else "fwd_bwd"
            out.append(f"{label:40s}  {_fmt(value) or '-'} / {_fmt(s[key]['min']) or '-'}  {cases}")
        else:
            out.append(f"{label:40s}  {_fmt(value) or '-':9s}  {cases}")
    below = [f"{r['id']} {d}" for d in ("bf16", "fp8") for r in s[d]["below"]]
    listed = ", ".join(below[:24]) + (f", ... ({len(below)} in all)" if len(below) > 24 else "")
    out.append(f"GEMMs below 0.90 (vendor >= 20 us): {listed or 'none'}")
    return "\n".join(out)
