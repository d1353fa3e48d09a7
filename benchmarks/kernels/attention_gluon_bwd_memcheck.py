"""Where the failing Gluon backward rings fault: each variant once under compute-sanitizer (memcheck, then
synccheck) on the ring bench's PROBE shape (B=2, S=1024, 4 query heads over 2 kv heads), d=64 non-causal (the case
that raises an illegal address), in a process of its own; the tool's first reports (kind, the access, the faulting
PTX source line: Triton's builds carry line info) go to the report. The 3-stage default is the control: it must
come out clean.

    python3 benchmarks/kernels/attention_gluon_bwd_memcheck.py --out DIR          # H200 (sm_90): ~2 min

``--variant NAME`` runs one variant in this process (what each sanitizer run calls).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from workbench.fileio import write_text

VARIANTS = {  # name: config (attention_gluon_bwd.VARIANT_KEYS allowed)
    "default-3-stages": {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 3},
    "2-stages": {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2},
    "2-stages-one-step": {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "ONE_STEP": 1},
    "2-stages-mask-all": {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "ONE_STEP": 2},
}
"""The run of 2026-12-02 (``results/h200/kernels/gluon_attention_bwd_ptxas/``) had RING_COUNTERS at 3 stages and one
consumer at 2 in place of the ONE_STEP builds (the step built once: does ptxas 12.8 build the 2-stage ring right
then?)."""
TOOLS = ("memcheck", "synccheck")
SHAPE = dict(batch=2, seq=1024, heads_q=4, heads_kv=2, head_dim=64, causal=False)
KEEP_LINES = 40
"""Lines of a sanitizer's output kept per run (its first reports name the access and the line)."""


def run_variant(name: str) -> int:
    """One backward of the variant on SHAPE (fresh seeded inputs), synchronized; prints its worst error against
    the 3-stage default's dQ, dK, dV (computed first, in this process) so a clean but wrong run shows too."""
    import torch
    from workbench.kernels import attention_gluon_bwd as bwd
    from workbench.kernels.attention_gluon import gluon_attention_forward

    torch.manual_seed(0)
    b, s, hq, hkv, d = (SHAPE[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim"))
    q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = gluon_attention_forward(q, k, v, SHAPE["causal"])
    scale = d ** -0.5
    reference = bwd.launch_backward(do, q, k, v, o, lse, SHAPE["causal"], scale, VARIANTS["default-3-stages"])
    config = bwd.check_variant(VARIANTS[name], d)
    grads = bwd.launch_backward(do, q, k, v, o, lse, SHAPE["causal"], scale, config)
    torch.cuda.synchronize()
    worst = max(float((g.float() - r.float()).abs().max() / r.float().abs().max()) for g, r in zip(grads, reference))
    print(f"RESULT {name} worst relative difference to the default {worst:.3e}")
    return 0


def sanitize(name: str, tool: str, limit_s: float) -> dict:
    """compute-sanitizer --tool TOOL on ``--variant name``: return code, seconds, its first KEEP_LINES lines of
    reports, the PTX source lines it names (attention_gluon_bwd.py:LINE) and the variant's RESULT line."""
    command = ["compute-sanitizer", "--tool", tool, "--print-limit", "8", "--show-backtrace", "device",
               sys.executable, __file__, "--variant", name]
    start = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s)
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as error:
        text, code = f"{error.stdout or ''}{error.stderr or ''}\ntimed out after {limit_s:.0f} s", None
    except FileNotFoundError:
        text, code = "compute-sanitizer not found", None
    reports = [line for line in text.splitlines() if line.startswith("=========")]
    return {"variant": name, "tool": tool, "rc": code, "seconds": round(time.monotonic() - start, 1),
            "lines": sorted(set(re.findall(r"attention_gluon\w*\.py:\d+", text))),
            "result": next((line for line in text.splitlines() if line.startswith("RESULT")), ""),
            "reports": reports[:KEEP_LINES]}


def ptxas() -> str:
    """The ptxas Triton compiles with (TRITON_PTXAS_PATH, else the one bundled with triton) and its version."""
    import triton

    path = triton.knobs.nvidia.ptxas.path
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except (OSError, IndexError):
        version = "?"
    return f"{path} ({version})"


def report(rows: list[dict], compiler: str) -> str:
    lines = ["# The Gluon backward's failing rings under compute-sanitizer", "",
             f"`benchmarks/kernels/attention_gluon_bwd_memcheck.py`; ptxas {compiler}; shape {SHAPE}. Per "
             "variant and tool: return "
             "code, the source lines the reports name, the variant's worst difference to the 3-stage default.", "",
             "| variant | tool | rc | s | errors | source lines named | result |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        errors = next((line for line in row["reports"] if "ERROR SUMMARY" in line), "").replace("=========", "")
        lines.append(f"| {row['variant']} | {row['tool']} | {row['rc']} | {row['seconds']} | {errors.strip()} | "
                     f"{', '.join(row['lines'][:8])} | {row['result'].removeprefix('RESULT ')} |")
    for row in rows:
        if row["reports"]:
            lines += ["", f"## {row['variant']}, {row['tool']}", "", "```", *row["reports"], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="output folder")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="run one variant here (the sanitizer's child)")
    parser.add_argument("--limit-s", type=float, default=60.0, help="per sanitizer run")
    args = parser.parse_args(argv)
    if args.variant:
        return run_variant(args.variant)
    if args.out is None:
        parser.error("--out DIR, or --variant NAME")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [sanitize(name, tool, args.limit_s) for name in VARIANTS for tool in TOOLS]
    text = report(rows, ptxas())
    write_text(args.out / "rows.json", json.dumps(rows, indent=1) + "\n")
    write_text(args.out / "REPORT.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
