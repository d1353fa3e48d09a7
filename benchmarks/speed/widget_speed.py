"""Redraw time of the workbench widget (issue #5 target: a control change redraws in < 250 ms for Llama 3 70B
on three GPUs). Measures ``Workbench.last_redraw_s``: validating the change, predicting every GPU (cache cleared
first: the worst case), building the active tab's chart data and chart, and handing the spec to the
JupyterChart widget. Not included: the browser's Vega rendering (tests/test_browser.py measures change-to-
render in headless Chromium and writes test-artifacts/browser/timings.json, which this script quotes).

    python benchmarks/speed/widget_speed.py     # writes benchmarks/results/widget_speed.csv and .md
"""

from __future__ import annotations

import csv
import json
import platform
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
BROWSER_TIMINGS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser" / "timings.json"
TARGET_MS = 250.0
REPEATS = 7
START = {"model": "llama3-70b", "gpus": ["b200", "mi350x", "h200-sxm"], "seq_len": 8192, "gpu_count": 8}
# (control, two values to alternate between): each change is a real change of the state
CHANGES: tuple[tuple[str, tuple, tuple], ...] = (
    ("precision", ("fp8",), ("bf16",)),
    ("gpus", (["b200", "mi355x", "h200-sxm"],), (["b200", "mi350x", "h200-sxm"],)),
    ("micro_batch", (2,), (1,)),
    ("seq_len", (4096,), (8192,)),
    ("gpu_count", (16,), (8,)),
    ("checkpointing", ("selective",), ("none",)),
    ("calibrated", (True,), (False,)),
)
TABS = ("roofline", "step time", "memory", "recipe")


def measure(wb, tab: str, control: str, values: tuple) -> list[float]:
    wb.set(tab=tab)
    times = []
    for i in range(REPEATS):
        wb.clear_cache()
        wb.set(**{control: values[i % 2][0]})
        times.append(wb.last_redraw_s * 1e3)
    return times


def main() -> None:
    start = time.perf_counter()
    from widgets import Workbench

    import_s = time.perf_counter() - start
    start = time.perf_counter()
    wb = Workbench(**START)
    construct_s = time.perf_counter() - start
    rows = []
    for tab in TABS:
        for control, first, second in CHANGES:
            times = measure(wb, tab, control, (first, second))
            rows.append({"tab": tab, "change": control, "median_ms": round(statistics.median(times), 1),
                         "max_ms": round(max(times), 1), "repeats": REPEATS,
                         "under_target": max(times) < TARGET_MS})
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "widget_speed.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    worst = max(rows, key=lambda r: r["max_ms"])
    lines = [
        "# Workbench widget redraw time",
        "",
        f"Llama 3 70B on three GPUs (B200, MI350X, H200), seq 8192, 8 GPUs each; {platform.processor() or platform.machine()}, "
        f"{__import__('os').cpu_count()} CPU cores, no GPU. `python benchmarks/speed/widget_speed.py`.",
        "",
        f"- import `widgets`: {import_s:.2f} s; `Workbench(...)` first draw: {construct_s:.2f} s (includes bundling "
        "the offline Vega JavaScript once)",
        f"- per control change ({REPEATS} repeats, prediction cache cleared before each): worst median "
        f"{max(r['median_ms'] for r in rows):.0f} ms, worst single {worst['max_ms']:.0f} ms "
        f"({worst['change']} on the {worst['tab']} tab); target {TARGET_MS:.0f} ms: "
        f"{'met' if all(r['under_target'] for r in rows) else 'NOT met'} for every change",
        "",
        "| tab | change | median ms | max ms |",
        "|---|---|---:|---:|",
        *[f"| {r['tab']} | {r['change']} | {r['median_ms']} | {r['max_ms']} |" for r in rows],
        "",
    ]
    if BROWSER_TIMINGS.exists():
        browser = json.loads(BROWSER_TIMINGS.read_text())
        lines += ["In the browser (tests/test_browser.py: Llama 3 8B -> 70B, then GPU and precision changes on 70B with "
                  "three GPUs; JupyterLab + headless Chromium on the same machine; "
                  "change in the widget to the new points in the roofline's SVG; includes Python, the widget "
                  "messages and Vega rendering):", ""]
        lines += [f"- {name}: {value * 1e3:.0f} ms" if name.endswith("_s") else f"- {name}: {value:,}"
                  for name, value in browser.items()]
    (RESULTS / "widget_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
