"""What a tile of the persistent Gluon attention forward costs at short sequences (issue 20: a01, B=16 S=512 32
heads d=128 causal, at 0.72 of cuDNN): the wired short causal config (``PERSISTENT_FORWARD``) and SDPA's cuDNN
backend on shapes of 2,048 query tiles of 128 rows each, with 1 to 8 key blocks a tile, causal and not, and with
one kv head (MQA: K/V in L2 throughout) beside 32.

    python3 benchmarks/kernels/attention_tile_cost_probe.py --out DIR      # H200: ~30 s

Each forward is timed by ``broad_shapes.Timer`` (do_bench medians, L2 flushed before each launch) over the
rotated order of ``attention_option_bench.rotating_timer``. Per kernel, a least-squares line of time per SM
against key blocks per SM (``fit_line``) splits its time into a per-tile part and a per-block part: 2,048 tiles
over 132 SMs at every point, so the intercept over 2,048 / 132 tiles is what one tile costs beyond its blocks.
Writes DIR/rows.csv, DIR/environment.json and DIR/REPORT.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

FIELDS = ["batch", "heads_q", "heads_kv", "seq", "causal", "kernel", "ms", "blocks_per_sm", "us_per_sm_block",
          "rel_err"]
TILES = 2048
"""Query tiles of 128 rows in every probe shape (a01's count)."""
SHAPES = [  # (batch, heads_q, heads_kv, seq, causal): 2,048 tiles of 128 rows each
    (64, 32, 32, 128, True), (32, 32, 32, 256, True), (16, 32, 32, 512, True), (8, 32, 32, 1024, True),
    (64, 32, 32, 128, False), (32, 32, 32, 256, False), (16, 32, 32, 512, False),
    (64, 32, 1, 128, True), (16, 32, 1, 512, True), (8, 32, 1, 1024, True), (16, 32, 1, 512, False),
]


def key_blocks(seq: int, causal: bool, block: int = 128) -> int:
    """Key blocks of 128 the shape's tiles visit in all, per head: causal 1 + 2 + ... + tiles, else tiles^2."""
    tiles = seq // block
    return tiles * (tiles + 1) // 2 if causal else tiles * tiles


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the points."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y - slope * mean_x, slope


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    import attention_option_bench
    import broad_shapes
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from workbench.fileio import write_text
    from workbench.kernels.attention_gluon import PERSISTENT_FORWARD, gluon_attention_forward, supported

    if not supported():
        print("needs an sm_90 GPU and triton with Gluon (TRITON_INTERPRET unset)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    args.dry_run, args.budget_s = False, 0.0  # broad_shapes.environment reads them
    env = broad_shapes.environment(True, args)
    write_text(args.out / "environment.json", json.dumps(env, indent=1) + "\n", overwrite=True)
    config = PERSISTENT_FORWARD[(128, True)][0][2]
    timer = attention_option_bench.rotating_timer(broad_shapes, 4)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, started = [], time.monotonic()
    log = broad_shapes.CsvLog(args.out / "rows.csv", FIELDS)
    for b, hq, hkv, s, causal in SHAPES:
        q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv))
        ours = {**config, "L2_SECTION_MIB": config["L2_SECTION_MIB"] if causal else 0}

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                        enable_gqa=hq != hkv)

        fns = {"ours": lambda: gluon_attention_forward(q, k, v, causal, config=ours)[0], "cudnn": cudnn}
        err = broad_shapes.relative_error(fns["ours"]()[:1], cudnn()[:1].float())
        blocks = b * hq * key_blocks(s, causal)
        for name, ms in timer.rounds(fns).items():
            rows.append(dict(batch=b, heads_q=hq, heads_kv=hkv, seq=s, causal=int(causal), kernel=name, ms=ms,
                             blocks_per_sm=blocks / sms, us_per_sm_block=ms * 1e3 / (blocks / sms), rel_err=err))
            log.add(rows[-1])
            print(json.dumps(rows[-1]), flush=True)
        del q, k, v
    lines = [f"# What a tile costs: the persistent Gluon forward against cuDNN ({env.get('gpu', '?')})", "",
             f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}). Ours: `{json.dumps(config, sort_keys=True)}` (unsectioned when not causal). "
             f"{TILES} query tiles of 128 rows in every shape, {sms} SMs; a key block is 128 keys of one tile.", "",
             "| b | hq/hkv | seq | causal | key blocks per SM | ours ms | cuDNN ms | cuDNN / ours | ours us per block "
             "per SM | cuDNN us per block per SM |", "|---|---|---|---|---|---|---|---|---|---|"]
    by_shape = {}
    for r in rows:
        by_shape.setdefault((r["batch"], r["heads_q"], r["heads_kv"], r["seq"], r["causal"]), {})[r["kernel"]] = r
    for (b, hq, hkv, s, causal), pair in by_shape.items():
        ours, cudnn = pair["ours"], pair["cudnn"]
        lines.append(f"| {b} | {hq}/{hkv} | {s} | {causal} | {ours['blocks_per_sm']:.1f} | {ours['ms']:.4f} | "
                     f"{cudnn['ms']:.4f} | {cudnn['ms'] / ours['ms']:.3f} | {ours['us_per_sm_block']:.3f} | "
                     f"{cudnn['us_per_sm_block']:.3f} |")
    lines += ["", "## Time per SM = per tile x tiles per SM + per block x key blocks per SM (least squares)", "",
              "| kernel | kv heads | causal | per tile, us | per key block, us | points |", "|---|---|---|---|---|---|"]
    for kernel in ("ours", "cudnn"):
        for hkv in (32, 1):
            for causal in (1, 0):
                pts = [r for r in rows if r["kernel"] == kernel and r["heads_kv"] == hkv and r["causal"] == causal]
                if len(pts) < 2:
                    continue
                intercept, slope = fit_line([r["blocks_per_sm"] for r in pts], [r["ms"] * 1e3 for r in pts])
                lines.append(f"| {kernel} | {hkv} | {causal} | {intercept / (TILES / sms):.3f} | {slope:.3f} | "
                             f"{len(pts)} |")
    lines += ["", f"Wall {time.monotonic() - started:.0f} s."]
    write_text(args.out / "REPORT.md", "\n".join(lines) + "\n", overwrite=True)
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
