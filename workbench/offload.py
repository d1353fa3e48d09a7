"""CPU offload's time: DeepSpeed's ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model
Training") keeps the fp32 master weights and AdamW moments on the host and runs the optimizer step there
(DeepSpeedCPUAdam); ZeRO-Infinity (Rajbhandari et al. 2021) also keeps ZeRO-3's parameter shards there
(``TrainingConfig.offload``; what leaves HBM: ``workbench.memory``).

Per rank and step, over the GPU's host link (``GPU.host_link_gb_s_per_direction`` x ``HOST_LINK_EFFICIENCY``):

- gradients down (device to host): the rank's reduced gradient shard, ``GRAD_BYTES_TO_HOST`` per parameter, each
  micro-batch (DeepSpeed accumulates on the host). Issued as each bucket is reduced, so it runs beside the
  backward pass (ZeRO-Offload's overlap of the copy with backward, Sec. 4.1; DeepSpeed ``overlap_comm``): what the
  micro-batch's backward (``BACKWARD_SHARE`` of its time) does not hide is exposed.
- the host step: DeepSpeedCPUAdam over the shard at its measured throughput, ``HOST_ADAM_PARAMS_PER_S`` per host.
  Every rank of a host steps at once on the same CPUs and memory, so the host updates the shard x the ranks on
  the host. The GPU waits for it, unless ``offload_delayed_update`` (ZeRO-Offload's one-step delayed parameter
  update, Sec. 4.3) runs it beside the next step's GPU work.
- parameters up (host to device): the updated bf16 shard, ``PARAM_BYTES_TO_GPU`` per parameter, after the step and
  before the next forward's gathers (exposed). With ``optimizer+params`` the shard stays on the host: instead each
  pass (forward, backward, and the recomputation under checkpointing) fetches it ahead of its all-gather,
  prefetched beside the micro-batch's compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.config import TrainingConfig
from workbench.errors import SpecError
from workbench.hardware import GPU
from workbench.models import TransformerModel

HOST_ADAM_PARAMS_PER_S = 3.9e9
"""DeepSpeedCPUAdam's measured throughput on one two-socket host, parameters updated per second: ZeRO-Offload
(Ren et al., USENIX ATC 2021, arXiv 2101.06840) Table 3, CPU-Adam latency on a DGX-2 host (2 x Xeon Platinum 8168,
48 cores, AVX512): 0.22 s for 1B parameters, 0.51 s for 2B, 1.03 s for 4B, 2.41 s for 8B, 2.57 s for 10B. The 10B
row is taken (2.57 s / 10e9 = 0.257 ns per parameter; the 2B and 4B rows agree within 1%, the 8B row is 15%
slower). Those figures are quoted from the paper, not re-read from a stored copy in this session: check them
against the PDF. Not scaled by the host's memory bandwidth: the update moves ~30 bytes per parameter (read the
fp32 parameter, gradient and both moments, write them back and the 16-bit copy), so the paper's host ran at
~3.9e9 x 30 = 117 GB/s of its 12 DDR4-2666 channels' 256 GB/s; newer HGX hosts (DGX H100: 2 x Xeon 8480C,
DDR5-4800, 614 GB/s; DGX B200: 2 x Xeon 8570) are not measured, and the DeepSpeed launcher starts every rank's
OpenMP pool on all cores unless ``--bind_cores_to_rank`` (deepspeed/launcher/launch.py; the tutorial's binding
gained 1.3x, DeepSpeed PR #7474), so eight ranks share the host oversubscribed. Guess for other hosts, calibrate
me: time ``optimizer.step()`` of DeepSpeedCPUAdam over 1e9 parameters per rank with all ranks of the host running,
HOST_ADAM_PARAMS_PER_S = ranks x 1e9 / seconds."""
HOST_LINK_EFFICIENCY = 0.82
"""Achieved share of the host link's per-direction peak: 52.8 GB/s device-to-host of PCIe Gen5 x16's 64, measured
with nvbandwidth on an H100 cluster (NVIDIA/nvbandwidth issue #24, device_to_host_memcpy_sm)."""
GPUS_PER_HOST = 8
"""GPUs sharing one host's CPUs and memory: 8 on HGX boards (NVIDIA HGX / DGX H100, H200, B200)."""
GRAD_BYTES_TO_HOST = 4
"""Bytes per parameter of the gradient copy: fp32, the dtype of the host's gradient buffer (DeepSpeed stage 3
``partition_grads`` copies the bf16 shard into it; the cast runs on the copy's source device, so fp32 crosses the
link). Calibrate against a trace's memcpy DtoH bytes."""
PARAM_BYTES_TO_GPU = 2
"""Bytes per parameter of the parameter copy: the bf16 working copy (cast on the host before the copy)."""
BACKWARD_SHARE = 2 / 3
"""The share of a micro-batch's GPU time the gradient copy can hide behind: its backward pass, two of the step's
three matmul passes (backward = 2 x forward FLOPs)."""


@dataclass(frozen=True)
class OffloadTime:
    """CPU offload's seconds in one step, per rank."""

    gradients_to_host_s: float
    gradients_exposed_s: float
    host_step_s: float
    """DeepSpeedCPUAdam over the rank's shard, the host's other ranks stepping at the same time."""
    params_to_gpu_s: float
    """The updated bf16 shard copied up after the step (0 with parameter offload)."""
    param_fetch_s: float
    """Parameter offload: the shard fetched for every pass of every micro-batch (0 without it)."""
    param_fetch_exposed_s: float
    exposed_s: float
    """What the step waits for: exposed gradient copies and fetches, and the host step and parameter copy (or, with
    the delayed update, what of them the GPU's step does not hide)."""


def host_link_gb_s(gpu: GPU) -> float:
    if gpu.host_link_gb_s_per_direction is None:
        raise SpecError(gpu.origin, "interconnect.host_link_gb_s_per_direction", None,
                        f"the GPU's host link bandwidth (CPU offload copies over it; {gpu.name} has none)")
    return float(gpu.host_link_gb_s_per_direction.value) * HOST_LINK_EFFICIENCY


def offload_time(model: TransformerModel, cfg: TrainingConfig, gpu: GPU, microbatch_s: float) -> OffloadTime:
    """The offload terms of one step of ``cfg`` (resolved, ``offload`` not 'none'); ``microbatch_s``: one
    micro-batch's GPU time (its ops, before collectives), which the copies and fetches hide behind."""
    p = cfg.parallelism
    accum = cfg.grad_accumulation
    link = host_link_gb_s(gpu) * 1e9
    shard = model.params_per_gpu(p.tp, p.pp, p.weight_replicas, p.ep, sharded=True)
    gradients = shard * GRAD_BYTES_TO_HOST / link * accum
    gradients_exposed = max(0.0, gradients - BACKWARD_SHARE * microbatch_s * accum)
    ranks_on_host = min(p.gpus, GPUS_PER_HOST)
    host_step = shard * ranks_on_host / HOST_ADAM_PARAMS_PER_S
    params_offloaded = cfg.offload == "optimizer+params"
    params_up = 0.0 if params_offloaded else shard * PARAM_BYTES_TO_GPU / link
    passes = 2 + (cfg.activation_checkpointing != "none")  # forward, backward (+ the recomputation's gathers)
    fetch = shard * PARAM_BYTES_TO_GPU * passes * accum / link if params_offloaded else 0.0
    fetch_exposed = max(0.0, fetch - microbatch_s * accum)
    after_backward = host_step + params_up
    if cfg.offload_delayed_update:  # step i's host work beside step i+1's GPU work
        after_backward = max(0.0, after_backward - microbatch_s * accum)
    return OffloadTime(gradients, gradients_exposed, host_step, params_up, fetch, fetch_exposed,
                       gradients_exposed + fetch_exposed + after_backward)


def offload_note(t: OffloadTime, cfg: TrainingConfig) -> str:
    """One line for a prediction's notes: where the offloaded step's seconds go."""
    ms = lambda s: f"{s * 1e3:,.0f} ms"  # noqa: E731
    parts = [f"gradients to host {ms(t.gradients_to_host_s)} ({ms(t.gradients_exposed_s)} exposed)",
             f"host AdamW {ms(t.host_step_s)}"]
    if t.param_fetch_s:
        parts.append(f"parameter fetches {ms(t.param_fetch_s)} ({ms(t.param_fetch_exposed_s)} exposed)")
    else:
        parts.append(f"parameters to GPU {ms(t.params_to_gpu_s)}")
    delayed = ", delayed update" if cfg.offload_delayed_update else ""
    return (f"CPU offload ({cfg.offload}{delayed}): " + ", ".join(parts) + f"; {ms(t.exposed_s)} in the step "
            f"(host AdamW at {HOST_ADAM_PARAMS_PER_S / 1e9:g}e9 parameters/s, ZeRO-Offload's DGX-2 measurement, "
            "and the gradient dtype are assumptions: workbench.offload)")


__all__ = ["BACKWARD_SHARE", "GPUS_PER_HOST", "GRAD_BYTES_TO_HOST", "HOST_ADAM_PARAMS_PER_S", "HOST_LINK_EFFICIENCY",
           "PARAM_BYTES_TO_GPU", "OffloadTime", "host_link_gb_s", "offload_note", "offload_time"]
