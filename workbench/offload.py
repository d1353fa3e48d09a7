"""CPU offload's time: DeepSpeed's ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model
Training") keeps the fp32 master weights and AdamW moments on the host and runs the optimizer step there
(DeepSpeedCPUAdam); ZeRO-Infinity (Rajbhandari et al. 2021) also keeps ZeRO-3's parameter shards there
(``TrainingConfig.offload``; what leaves HBM: ``workbench.memory``).

Per rank and step, over the GPU's host link (``GPU.host_link_gb_s_per_direction`` x ``HOST_LINK_EFFICIENCY``):

- gradients down (device to host): the rank's reduced gradient shard, ``GRAD_BYTES_TO_HOST`` per parameter, each
  micro-batch (DeepSpeed accumulates on the host). Issued as each bucket is reduced, so it runs beside the
  backward pass (ZeRO-Offload's overlap of the copy with backward, Sec. 4.1; DeepSpeed ``overlap_comm``): what the
  micro-batch's backward (``BACKWARD_SHARE`` of its time) does not hide is exposed.
- the host step: AdamW over the shard, bound by the host's memory bandwidth. Every rank of a host steps at once,
  so the host streams ``HOST_ADAM_BYTES_PER_PARAM`` x (the shard x the ranks on the host) through
  ``HOST_MEMORY_GB_S``. The GPU waits for it, unless ``offload_delayed_update`` (ZeRO-Offload's one-step delayed
  parameter update, Sec. 4.3) runs it beside the next step's GPU work.
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

HOST_ADAM_BYTES_PER_PARAM = 30
"""Host memory traffic of one AdamW update: read the fp32 parameter, gradient and both moments (16 bytes), write the
parameter and moments (12) and the bf16 copy sent to the GPU (2); DeepSpeedCPUAdam's loop (csrc/adam/
cpu_adam_impl.cpp) makes one pass over them, so the step is bound by this traffic, not by its ~10 FLOPs."""
HOST_MEMORY_GB_S = 300.0
"""Guess, calibrate me: the host memory bandwidth the DeepSpeedCPUAdam steps of all ranks of one host achieve
together. HGX H100/H200/B200 hosts are two-socket Xeons with eight DDR5 channels per socket (DGX H100: Xeon
Platinum 8480C, DDR5-4800, 2 x 307 GB/s peak; DGX B200: Xeon Platinum 8570, DDR5-5600, 2 x 358 GB/s); half of
DGX H100's 614 GB/s peak is taken (a read-modify-write stream over both sockets' memory, threads per rank set by
the launcher). Calibrate: time ``optimizer.step()`` of DeepSpeedCPUAdam on the host over 1e9 parameters per rank
with all ranks running (DeepSpeed tests/perf/adam_test1.py), HOST_MEMORY_GB_S = ranks x 1e9 x 30 / seconds / 1e9."""
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
    host_step = shard * ranks_on_host * HOST_ADAM_BYTES_PER_PARAM / (HOST_MEMORY_GB_S * 1e9)
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
            f"(host memory {HOST_MEMORY_GB_S:g} GB/s and gradient dtype are guesses: workbench.offload)")


__all__ = ["BACKWARD_SHARE", "GPUS_PER_HOST", "GRAD_BYTES_TO_HOST", "HOST_ADAM_BYTES_PER_PARAM", "HOST_LINK_EFFICIENCY",
           "HOST_MEMORY_GB_S", "PARAM_BYTES_TO_GPU", "OffloadTime", "host_link_gb_s", "offload_note", "offload_time"]
