"""The GEMM kernel's time model per config: ``time = coefficients . terms(shape, config)``.

The terms are the microarchitecture's bookkeeping, computed exactly from the shape and the config:

- output tiles ``ceil(M / BLOCK_M) * ceil(N / BLOCK_N)`` spread over the SMs/CUs: each unit runs
  ``tiles_per_unit = ceil(tiles / units)`` of them one after another (wave quantization; the tail wave costs a
  whole tile time), each walking ``k_steps = ceil(K / BLOCK_K)`` pipelined K steps;
- ``fill``, the fraction of the units busy: a partial wave leaves each busy unit more L2/HBM bandwidth;
- the layout (A transposed: ``tn``; B transposed: ``nt``) and a K that is not a multiple of BLOCK_K (masked
  loads). Every operand row the kernel loads is 16-byte aligned: it passes strides divisible by 8, 4 or 2
  elements as hints (Triton's own specialisation only knows "divisible by 16") and copies operands whose rows are
  not aligned into padded buffers (``padding``; the copy is a cost outside the configs, ``padding_bytes``). So an
  M or N that is not a multiple of 16 leaves the K loop as it is (the same 16-byte ``cp.async`` loads in the
  sm_90 PTX); it only costs in the epilogue, when N is not (``tiles_unaligned_c``);
- programs resident per unit (``occupancy``): their tiles overlap, so the waves over units x resident programs
  bound the latency path.

A config's coefficients say what each term costs in seconds. Calibrated coefficients are fitted per config from
an exhaustive sweep on the GPU (``workbench.select.fit``); without them, ``spec_coefficients`` derives them from
the GPU's catalog figures and the model's constants, with the guesses named below.
"""

from __future__ import annotations

import math

from workbench.hardware import GPU
from workbench.kernels.spaces import (config_stages, gluon_shared_bytes, is_gluon, is_swap_ab, is_tma,
                                      tma_config_space, tma_out_bytes, tma_shared_bytes)
from workbench.perf.efficiency import Constants
from workbench.precision import get_precision

TERMS = ("k_steps", "k_steps_x_fill", "tiles_per_unit", "launch", "k_steps_tn", "k_steps_nt",
         "k_steps_ragged_k", "wave_k_steps", "tiles_unaligned_c")
"""The per-config terms, all counted per unit (SM/CU) along the critical path: ``k_steps`` is
tiles_per_unit x ceil(K / BLOCK_K); the ``k_steps_*`` terms are k_steps where that condition holds;
``wave_k_steps`` is ceil(tiles / (units x resident programs per unit)) x ceil(K / BLOCK_K), the latency-bound
path when programs that share a unit overlap (a config that fits one more program per SM can finish a tail
wave early); ``tiles_unaligned_c`` is tiles_per_unit where N is not a multiple of 16 (``STORE_VECTOR_N``), so
each tile's epilogue stores element by element. K is the kernel's: padded to 16 bytes where ``gemm.pad_unaligned``
pads it.

Until 2026-11 the model also had ``k_steps_ragged_m``/``k_steps_ragged_n`` (k_steps where M or N is not a multiple
of 16), a per-K-step cost from before the kernel padded its operands and wrapped its loads; the padded kernel's K
loop does not depend on them (sm_90 PTX), and their per-config fits (on a few odd shapes each) decided the
held-out picks of 1999x2999x3999 and 3000x5000x777 wrongly (benchmarks/results/h200/select/REPORT.md)."""
STORE_VECTOR_N = 16
"""The kernel's C store ``c_ptr + rows * stride_cm + cols`` under the mask ``cols < N`` is vectorised only when
Triton knows N (the mask's bound and, for a contiguous C, the row stride) divisible by 16, its integer
specialisation: with N = 5000 (rows 16-byte aligned, but 5000 % 16 = 8) the sm_90 PTX stores element by element
(``st.global.b16``) exactly as with N = 2999, and with N = 5008 in 16-byte vectors (``st.global.v4.b32``);
checked with ``workbench.kernels.crosscompile``'s sm_90 build. M does not matter (its mask runs across rows)."""
LAYOUTS = ("nn", "nt", "tn")
"""C = A @ B with A row-major (n) or transposed (t, column-major), then B likewise."""
VECTOR_BYTES = 16
"""Triton vectorises loads along a row only when the row stride is a multiple of 16 bytes (PTX ld.v4.b32)."""

# Spec-only guesses (used for GPUs without a fitted selection profile, e.g. every AMD GPU here).
L2_TO_HBM_BANDWIDTH = 2.5
"""L2 bandwidth over HBM bandwidth, the rate at which K-step operand tiles reach the units. A guess (H100-class
L2 is quoted at 2-3x HBM in microbenchmark papers); calibrate with `workbench select --fit`."""
RAGGED_K_COST = 0.05
"""Extra cost of masked K steps, as a fraction of a K step. A guess."""
TILE_OVERHEAD_STEPS = 1.0
"""Pipeline fill and epilogue per tile, in K-step times per pipeline stage. A guess."""
UNALIGNED_STORE_STEPS = 1.0
"""Extra time per tile, in K-step times, when N is not a multiple of 16 and the epilogue stores element by
element. A guess (on the H200 the fitted cost flips 128x256 vs 256x128 picks on such shapes)."""
GLUON_STEP_FRACTION = {True: 0.8, False: 1.0}
"""Time of a Gluon config (``gemm_gluon.py``) over that of the Triton kernels' config of the same tile, by
WARP_SPECIALIZE: its warp-specialized configs overlap the exact fp8 promotion that Triton's lowering drains the
tensor cores for. A guess from the H200 probe (benchmarks/results/h200/kernels/gluon/summary.txt: Gluon ws 1.00-1.03
of torch._scaled_mm, non-ws 0.82-0.92, the TMA kernel's pick 0.77-0.92); it prices Gluon configs only until
``select_sweep.py --gluon`` is fitted into the profile (``spec_coefficients``, ``gluon_anchor``)."""
AMD_NONKDIM32_COST = 1.05
"""matrix_instr_nonkdim=32 vs 16 on CDNA: ROCm's MI300X guide says 16 is usually faster. The 5% is a guess."""
AMD_WAVES_PER_EU_HIDE = 0.8
"""waves_per_eu=2 hides this fraction of the per-tile overhead behind another workgroup. A guess."""
AMD_XCDS = {"cdna3": 8, "cdna4": 8}
"""Accelerator complex dies per package (MI300X/MI325X, MI350X/MI355X: 8 XCDs of 38 or 32 CUs, each with its own
L2; AMD CDNA3 and CDNA4 white papers). Programs are dealt round-robin over XCDs, so neighbours share no L2."""


def config_key(config: dict) -> str:
    """A stable, readable name for a config: ``128x256x64 g8 w8 s4`` for a GEMM, ``128x64 w8 s3`` for
    attention (+ the AMD knobs), ``tma 256x128x128 g8 w8 s3 sub2`` for the TMA GEMM, ``gluon 128x128x128 g8 w8 s4
    ws`` for the Gluon GEMM."""
    key = f"{config['BLOCK_M']}x{config['BLOCK_N']}"
    if "BLOCK_K" in config:
        key += f"x{config['BLOCK_K']} g{config.get('GROUP_M', 8)}"
    key += f" w{config['num_warps']} s{config_stages(config)}"
    if is_gluon(config):  # one key for both accumulation modes: the sweep (and so the fit) is exact
        key = f"gluon {key}" + (" ws" if config["WARP_SPECIALIZE"] else "")
    if is_tma(config):
        key = f"tma {key} sub{config['EPILOGUE_SUBTILE']}" + (" ws" if config["WARP_SPECIALIZE"] else "")
    if is_swap_ab(config):
        key += " swap"
    if config.get("SPLIT_K", 1) > 1:
        key += f" split{config['SPLIT_K']}"
    if config.get("STREAM_K"):  # gemm_tma.py's stream-K (an explicit config: config=None does not rank it)
        key += " streamk"
    for knob, tag in (("waves_per_eu", "wpe"), ("matrix_instr_nonkdim", "nk"), ("kpack", "kp")):
        if knob in config:
            key += f" {tag}{config[knob]}"
    return key


def _unaligned(elements: int, operand_bytes: int) -> bool:
    return (elements * operand_bytes) % VECTOR_BYTES != 0


def padding(m: int, n: int, k: int, layout: str, operand_bytes: int) -> tuple[int, int, int]:
    """(M_LOAD, N_LOAD, K) as the kernel sees them after ``workbench.kernels.gemm.pad_unaligned``: an operand
    whose rows are not 16-byte aligned is copied into a padded buffer (K padded in both operands, M of a
    column-major A, N of a row-major B), so every operand row gets vector loads."""
    step = max(1, VECTOR_BYTES // operand_bytes)
    up = lambda size: -(-size // step) * step  # noqa: E731
    tn, nt = layout == "tn", layout == "nt"
    pad_k = not tn and _unaligned(k, operand_bytes)  # K is A's row stride (nn, nt) and B's too (nt)
    pad_m = tn and _unaligned(m, operand_bytes)
    pad_n = not nt and _unaligned(n, operand_bytes)
    return up(m) if pad_m else m, up(n) if pad_n else n, up(k) if pad_k else k


def padding_bytes(m: int, n: int, k: int, layout: str, operand_bytes: int) -> int:
    """Bytes the padding copies move (each padded operand read once and its padded buffer written twice: the
    zero fill and the copy); 0 when nothing is padded."""
    m_load, n_load, k_load = padding(m, n, k, layout, operand_bytes)
    moved = 0
    if k_load != k or m_load != m:
        moved += (m * k + 2 * m_load * k_load) * operand_bytes
    if k_load != k or n_load != n:
        moved += (k * n + 2 * k_load * n_load) * operand_bytes
    return moved


def terms(config: dict, m: int, n: int, k: int, layout: str, operand_bytes: int, units: int,
          resident: int = 1) -> tuple[float, ...]:
    """The TERMS of one GEMM C[m, n] = A[m, k] @ B[k, n] under ``config`` on ``units`` SMs/CUs with ``resident``
    programs per unit. A swap-AB config (``spaces.skinny_config_space``) is counted on the problem its kernel runs:
    C^T [n, m] = B^T A^T, each operand's transposition flipped (B row-major is B^T column-major)."""
    if is_swap_ab(config):
        flip = {"n": "t", "t": "n"}
        m, n, layout = n, m, flip[layout[1]] + flip[layout[0]]
    k = padding(m, n, k, layout, operand_bytes)[2]
    split = config.get("SPLIT_K", 1)  # split-K: SPLIT_K programs per output tile, each over a K slice
    tiles = math.ceil(m / config["BLOCK_M"]) * math.ceil(n / config["BLOCK_N"]) * split
    per_unit = math.ceil(tiles / units)
    tile_steps = math.ceil(math.ceil(k / config["BLOCK_K"]) / split)
    steps = per_unit * tile_steps
    waves = math.ceil(tiles / (units * max(1, resident)))
    fill = min(1.0, tiles / units)
    tn, nt = layout[0] == "t", layout[1] == "t"  # A column-major, B column-major (a swap-AB "tt": both)
    # TMA and Gluon store through a descriptor, no mask
    scalar_store = n % STORE_VECTOR_N != 0 and not is_tma(config) and not is_gluon(config)
    return (steps, steps * fill, per_unit, 1.0, steps * tn, steps * nt,
            steps * (k % config["BLOCK_K"] != 0), waves * tile_steps, per_unit * scalar_store)


def occupancy(config: dict, gpu: GPU, operand_bytes: int) -> int:
    """Programs resident per SM/CU, from shared memory/LDS and registers (0: the config does not fit).

    Shared memory per program: Triton keeps num_stages copies of the A and B tiles on NVIDIA and num_stages - 1
    on AMD (checked against ``metadata.shared`` of sm_90/gfx942/gfx950 builds by ``workbench kernels inspect``).
    Registers: the fp32 accumulator (BLOCK_M * BLOCK_N per program) plus the same again for operands and
    addresses (a guess; ``workbench kernels inspect`` reports the real count per config).
    """
    if is_tma(config):  # persistent: one program per SM walks its tiles
        shared = tma_shared_bytes(config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["num_stages"],
                                  config["EPILOGUE_SUBTILE"], operand_bytes, tma_out_bytes(operand_bytes))
        return int(shared <= gpu.shared_memory_kb.value * 1024)
    if is_gluon(config):  # persistent too: one program per SM (gemm_gluon's grid is min(SMs, tiles))
        shared = gluon_shared_bytes(config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["NUM_STAGES"])
        return int(shared <= gpu.shared_memory_kb.value * 1024)
    stages = config["num_stages"] - (1 if gpu.vendor == "amd" else 0)
    shared = max(1, stages) * (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * operand_bytes
    by_shared = int(gpu.shared_memory_kb.value * 1024 // shared)
    registers = 2 * config["BLOCK_M"] * config["BLOCK_N"] * 4  # bytes: accumulator + operands (guess)
    by_registers = int(gpu.register_file_kb.value * 1024 // registers)
    return max(0, min(by_shared, by_registers, 4))


def spec_coefficients(config: dict, gpu: GPU, dtype: str, constants: Constants) -> tuple[float, ...]:
    """Coefficients for TERMS from catalog figures and the model's constants (no measurement of this kernel)."""
    precision = get_precision(dtype)
    operand_bytes = precision.bytes_per_element
    units = gpu.compute_units.value
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    saturation = constants["gemm_tile_intensity_saturation"]
    tile_efficiency = min(1.0, (bm * bn / (bm + bn)) / saturation)
    rate = gpu.peak_tflops(precision.peak_key) * 1e12 * constants[f"gemm_fraction.{precision.peak_key}"] / units
    l2_per_unit = gpu.hbm_bandwidth_tb_s.value * 1e12 * L2_TO_HBM_BANDWIDTH / units
    if gpu.vendor == "amd":  # no L2 sharing across XCDs: each tile's operands come further
        l2_per_unit /= 1.0 + 1.0 / AMD_XCDS.get(gpu.architecture, 8)
    mma = 2.0 * bm * bn * bk / (rate * tile_efficiency)
    load_a, load_b = bm * bk * operand_bytes / l2_per_unit, bn * bk * operand_bytes / l2_per_unit
    step = max(mma, load_a + load_b)
    if is_gluon(config):
        step *= GLUON_STEP_FRACTION[bool(config["WARP_SPECIALIZE"])]
    overhead = TILE_OVERHEAD_STEPS * config_stages(config) * step
    if gpu.vendor == "amd":
        step *= AMD_NONKDIM32_COST if config.get("matrix_instr_nonkdim") == 32 else 1.0
        overhead *= AMD_WAVES_PER_EU_HIDE if config.get("waves_per_eu") == 2 else 1.0
    return (step, 0.0, overhead, constants["gemm_launch_us"] * 1e-6, 0.0, 0.0, RAGGED_K_COST * step, 0.0,
            UNALIGNED_STORE_STEPS * step)


def gluon_anchor(config: dict, table: dict) -> tuple[float, ...] | None:
    """Coefficients for a Gluon config that a selection profile does not cover yet: the fitted coefficients of
    the TMA kernel's fp8 config nearest to it (same tile area and BLOCK_K if the profile has one, then the
    closest warps and stages), times GLUON_STEP_FRACTION. Both kernels are persistent, one program per SM, with
    TMA loads and stores, so the fitted terms carry over; only the K step differs. None without a TMA config in
    ``table``."""
    def distance(other: dict) -> tuple:
        area = abs(math.log2(other["BLOCK_M"] * other["BLOCK_N"] / (config["BLOCK_M"] * config["BLOCK_N"])))
        return (area, abs(math.log2(other["BLOCK_K"] / config["BLOCK_K"])), other["num_warps"] != config["num_warps"],
                abs(other["num_stages"] - config["NUM_STAGES"]), config_key(other))
    fitted = [c for c in tma_config_space(1) if config_key(c) in table]
    if not fitted:
        return None
    nearest = min(fitted, key=distance)
    fraction = GLUON_STEP_FRACTION[bool(config["WARP_SPECIALIZE"])]
    return tuple(value * fraction for value in table[config_key(nearest)])


TMA_LAYOUT_FREE_TERMS = ("k_steps_tn", "k_steps_nt", "tiles_unaligned_c")
"""Terms a TMA config does not pay, priced from a gemm.py config (``tma_anchor``): TMA copies an A or B tile as
one 2-D box whichever dimension of it is contiguous (``gemm_tma.py``: B row-major or column-major), and stores C
through a descriptor, without the element-wise masked store."""
TMA_STEP_FRACTION = 1.0
"""Time of a bf16 TMA config over gemm.py's config of the same tile, warps and stages, B row-major. A guess from the
H200 (benchmarks/results/h200/kernels/tma/SUMMARY.md: TMA 128x256x64 w8 s3 sub2 0.989 of torch.matmul over the 12
Llama 3 shapes, gemm.py's best of 3 configs 0.973), kept at 1 so that ties on "nn" stay with gemm.py (ranked
first). The H200 profile no longer needs it: its bf16 TMA configs carry coefficients of their own
(``tma_scaled``, fitted by benchmarks/select/fit_tma_pricing.py on benchmarks/results/h200/kernels/skinny/sweep.csv);
a profile without them still gets the anchor."""


def tma_anchor(config: dict, table: dict) -> tuple[float, ...] | None:
    """Coefficients for a TMA config that a selection profile does not cover (bf16 until a TMA sweep is fitted):
    the fitted coefficients of gemm.py's config with the same BLOCK_M/N/K, GROUP_M and warps, at the stage count
    that gemm.py runs fastest per K step (TMA's pipeline is not gemm.py's: on the H200 TMA 128x256x64 ran best at 3
    stages, gemm.py at 4), without the layout and unaligned-store terms (``TMA_LAYOUT_FREE_TERMS``), times
    ``TMA_STEP_FRACTION``. So the TMA configs of one tile tie, and the space's order (its measured default first)
    breaks the tie. None when the profile has no gemm.py config of that tile and warps."""
    twins = [table[key] for stages in range(1, 9)
             if (key := config_key({**config, "KERNEL": None, "num_stages": stages})) in table]
    if not twins:
        return None
    fitted = min(twins, key=lambda coefficients: coefficients[TERMS.index("k_steps")])
    return tuple(0.0 if term in TMA_LAYOUT_FREE_TERMS else value * TMA_STEP_FRACTION
                 for term, value in zip(TERMS, fitted))


STEP_TERMS = ("k_steps", "k_steps_x_fill", "k_steps_tn", "k_steps_nt", "k_steps_ragged_k", "wave_k_steps")
"""The terms priced per K step (the rest per tile or per launch)."""


def tma_scaled(config: dict, table: dict, step_scale: float, tile_scale: float) -> tuple[float, ...] | None:
    """Coefficients for a TMA config from its gemm.py twin's (``tma_anchor``) with the per-K-step terms times
    ``step_scale`` and the per-tile term (``tiles_per_unit``: pipeline fill and epilogue) times ``tile_scale``: the
    kernel family's measured correction. The persistent TMA kernel overlaps a tile's epilogue with the next tile's
    loads, which gemm.py's one-tile programs cannot, so short-K GEMMs (few K steps per tile) gain most.
    ``benchmarks/select/fit_tma_pricing.py`` fits the two scales on the fit half of an H200 sweep and writes the
    result into the selection profile per config. None when ``tma_anchor`` has no twin."""
    anchored = tma_anchor(config, table)
    if anchored is None:
        return None
    return tuple(value * step_scale if term in STEP_TERMS else value * tile_scale if term == "tiles_per_unit"
                 else value for term, value in zip(TERMS, anchored))


def skinny_anchor(config: dict, table: dict) -> tuple[float, ...] | None:
    """Coefficients for a swap-AB config (``spaces.skinny_config_space``, not swept yet): those fitted for the
    gemm.py config nearest to its unsplit, unswapped self (same BLOCK_M and BLOCK_K if the profile has one, then the
    closest tile area, warps and stages), the per-K-step ones scaled by the operand bytes per K step,
    (BLOCK_M + BLOCK_N) * BLOCK_K, over the anchor's. A skinny GEMM's K step is memory-bound: it streams its two
    operand tiles and its MMA (a 128 x 16 tile's wgmma) is short, so its time follows its bytes (a guess to
    calibrate with benchmarks/kernels/gemm_skinny_sweep.py). None without a gemm.py config in ``table``."""
    plain = [key for key in table if key[0].isdigit() and " split" not in key and " swap" not in key]
    if not plain:
        return None

    def parsed(key: str) -> dict:
        tile, _, warps, stages = key.split()
        bm, bn, bk = (int(x) for x in tile.split("x"))
        return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=int(warps[1:]), num_stages=int(stages[1:]))

    def distance(other: dict) -> tuple:
        return (other["BLOCK_M"] != config["BLOCK_M"], other["BLOCK_K"] != config["BLOCK_K"],
                abs(math.log2(other["BLOCK_M"] * other["BLOCK_N"] / (config["BLOCK_M"] * config["BLOCK_N"]))),
                other["num_warps"] != config["num_warps"], abs(other["num_stages"] - config["num_stages"]))
    nearest_key = min(plain, key=lambda key: (distance(parsed(key)), key))
    nearest = parsed(nearest_key)
    ratio = ((config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"]
             / ((nearest["BLOCK_M"] + nearest["BLOCK_N"]) * nearest["BLOCK_K"]))
    return tuple(value * ratio if term in STEP_TERMS else value for term, value in zip(TERMS, table[nearest_key]))


def split_k_anchor(config: dict, table: dict) -> tuple[float, ...] | None:
    """Coefficients for a split-K config (not swept yet): those fitted for its unsplit twin. A split program is the
    twin's program over a shorter K (``terms`` counts SPLIT_K x the tiles and K / SPLIT_K steps each); the fp32
    partials and their reduction are priced apart (``split_k_reduce_s``). None when the profile lacks the twin."""
    twin = {key: value for key, value in config.items() if key != "SPLIT_K"}
    fitted = table.get(config_key(twin))
    return None if fitted is None else tuple(fitted)


def split_k_reduce_s(m: int, n: int, split: int, out_bytes: int, gpu: GPU, constants: Constants) -> float:
    """Split-K's extra time: the fp32 partials [split, m, n] written by the GEMM and read back by the reduction,
    C written in its dtype, at the achievable HBM bandwidth, plus the reduction's launch (0 unsplit). The partials
    of a skinny GEMM may stay in L2, so this leans slow (a guess to calibrate with a split-K sweep)."""
    if split <= 1:
        return 0.0
    moved = 2 * split * m * n * 4 + m * n * out_bytes
    return moved / (gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["gemm_memory_fraction"]) + \
        constants["gemm_launch_us"] * 1e-6


def tma_split_k_reduce_s(config: dict, m: int, n: int, gpu: GPU, constants: Constants) -> float:
    """The TMA kernel's split-K extra time: each unit's fp32 partial tile (whole BLOCK_M x BLOCK_N tiles, padding
    included) written and read back by the tile's last unit, at the achievable HBM bandwidth; no second launch
    (0 unsplit). The partials may stay in L2, so this leans slow (a guess, calibrate me)."""
    split = config.get("SPLIT_K", 1)
    if split <= 1:
        return 0.0
    tiles = math.ceil(m / config["BLOCK_M"]) * math.ceil(n / config["BLOCK_N"])
    moved = 2 * tiles * split * config["BLOCK_M"] * config["BLOCK_N"] * 4
    return moved / (gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["gemm_memory_fraction"])


def padding_s(m: int, n: int, k: int, layout: str, operand_bytes: int, gpu: GPU, constants: Constants) -> float:
    """The padding copies' time (``padding_bytes`` at the achievable HBM bandwidth): the same for every config,
    added to each candidate's time (and taken off measured times before a fit)."""
    moved = padding_bytes(m, n, k, layout, operand_bytes)
    return moved / (gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["gemm_memory_fraction"]) if moved else 0.0


def memory_floor_s(m: int, n: int, k: int, dtype: str, gpu: GPU, constants: Constants) -> float:
    """No config beats moving A, B and C through HBM once at the achievable bandwidth."""
    precision = get_precision(dtype)
    out_bytes = 2 if precision.bytes_per_element <= 2 else precision.bytes_per_element
    moved = (m * k + k * n) * precision.bytes_per_element + m * n * out_bytes
    return moved / (gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["gemm_memory_fraction"])
