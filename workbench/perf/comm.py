"""Collectives by the alpha-beta model (Hockney 1994; ring algorithms as in Thakur, Rabenseifner, Gropp 2005):
time = steps x alpha + bytes on the busiest link / (link bandwidth x link_efficiency).

``size_bytes`` is the full logical buffer (the gathered tensor, the reduced gradient); for an all-to-all it is
each rank's send buffer, of which (n-1)/n leaves the rank. A group inside one
scale-up domain (NVLink / xGMI) runs at the scale-up bandwidth per direction; a group that spans nodes is
bottlenecked by each GPU's scale-out NIC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.hardware import GPU
from workbench.perf.efficiency import Constants, derived

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


@dataclass(frozen=True)
class Link:
    bandwidth_bytes_s: float
    latency_s: float
    name: str


def group_link(gpu: GPU, constants: Constants, spans_nodes: bool) -> Link:
    """The link a group's traffic is bounded by: scale-up inside a domain, the NIC across nodes. A ring across
    nodes also runs its steps inside each node, so it is never faster than the scale-up link: its bandwidth is at
    most scale-up's and its per-step latency at least scale-up's (the calibrated H200 profile fits a 42.9 us
    scale-up latency, above the 20 us scale-out guess: without the floor a larger scale-up domain made 64-GPU
    steps up to 50% slower, benchmarks/model/monotonicity_sweep.py). Made once per GPU and constants
    (``efficiency.derived``): every candidate of a search asks."""
    scale_up, scale_out = derived(_group_links, gpu, constants)
    return scale_out if spans_nodes else scale_up


def _group_links(gpu: GPU, constants: Constants) -> tuple[Link, Link]:
    """(inside one scale-up domain, spanning nodes): ``group_link`` for ``spans_nodes`` False and True."""
    efficiency = constants["link_efficiency"]
    scale_up = Link(gpu.scale_up_gb_s_per_direction.value * 1e9 * efficiency,
                    constants["scale_up_latency_us"] * 1e-6, "scale-up")
    scale_out = Link(min(gpu.scale_out_gb_s_per_direction.value * 1e9 * efficiency, scale_up.bandwidth_bytes_s),
                     max(constants["scale_out_latency_us"] * 1e-6, scale_up.latency_s), "scale-out")
    return scale_up, scale_out


def collective_time(kind: Collective, size_bytes: float, group: int, link: Link) -> float:
    """Seconds for one collective over ``group`` ranks; zero for a group of one."""
    if group <= 1 or size_bytes <= 0:
        return 0.0
    n = group
    if kind == "all_reduce":  # reduce-scatter then all-gather: 2(n-1) steps, 2(n-1)/n of the buffer per link
        steps, traffic = 2 * (n - 1), 2 * (n - 1) / n * size_bytes
    elif kind in ("all_gather", "reduce_scatter", "all_to_all"):
        steps, traffic = n - 1, (n - 1) / n * size_bytes
    elif kind == "send_recv":
        steps, traffic = 1, size_bytes
    else:
        raise ValueError(f"unknown collective {kind!r}; expected one of {', '.join(COLLECTIVES)}")
    return steps * link.latency_s + traffic / link.bandwidth_bytes_s
