"""Tiled GEMM (workbench/kernels/gemm.py) against the float64 torch reference, on the Triton CPU interpreter:
odd, tiny and tile-sized shapes, transposed and strided inputs, fp32/fp16/bf16, fp8 with per-tensor and per-row
scales, bias and every activation; plus input checks, the per-backend config spaces, counts and bench cases."""

import pytest
import torch

from workbench.kernels import cases, dispatch, gemm
from workbench.kernels._common import KernelInputError, amd_arch, interpreting
from workbench.kernels.cases import gemm_cases as bench_cases
from workbench.kernels.checks import ACTIVATIONS
from workbench.kernels.dispatch import triton_matmul as matmul
from workbench.kernels.dispatch import triton_scaled_matmul as scaled_matmul
from workbench.kernels.gemm import TOLERANCE, bytes_moved, config_space, flops
from workbench.kernels.reference import reference_matmul, reference_scaled_matmul
from workbench.rows import row_to_op

pytestmark = [
    pytest.mark.skipif(not interpreting() and not torch.cuda.is_available(),
                       reason="needs TRITON_INTERPRET=1 or a GPU"),
    # tl.sigmoid of a large negative number overflows numpy's exp to inf under the interpreter (the result, 0, is right)
    pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
]
DEVICE = "cpu" if interpreting() else "cuda"
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SHAPES = [(37, 53, 29), (1, 1, 1), (64, 64, 64), (33, 17, 70)]  # (M, N, K): odd, single element, whole tiles, K tail
SMALL_TILES = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error ||ours - ref|| / ||ref||."""
    return ((ours.double() - ref).norm() / ref.norm()).item()


def _randn(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(DEVICE, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matmul_matches_reference(m, n, k, dtype):
    a, b = _randn(m, k, dtype=DTYPES[dtype]), _randn(k, n, dtype=DTYPES[dtype])
    out = matmul(a, b)
    assert out.shape == (m, n) and out.dtype == DTYPES[dtype]
    assert _error(out, reference_matmul(a, b)) < TOLERANCE[dtype]


def test_empty_dimensions():
    bias = _randn(7)
    out = matmul(_randn(5, 0), _randn(0, 7), bias=bias, activation="relu")  # K = 0: act(bias) in every row
    assert torch.equal(out, torch.relu(bias).expand(5, 7))
    assert matmul(_randn(0, 3), _randn(3, 4)).shape == (0, 4)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("layout", ["a_col_major", "b_col_major", "both_col_major", "strided"])
def test_transposed_and_strided_inputs(layout, dtype):
    (m, n, k), dtype_ = (37, 53, 29), DTYPES[dtype]
    a = _randn(k, m, dtype=dtype_).t() if layout in ("a_col_major", "both_col_major") else _randn(m, k, dtype=dtype_)
    b = _randn(n, k, dtype=dtype_).t() if layout in ("b_col_major", "both_col_major") else _randn(k, n, dtype=dtype_)
    if layout == "strided":  # every other column of A, every third row of B
        a, b = _randn(m, 2 * k, dtype=dtype_)[:, ::2], _randn(3 * k, n, dtype=dtype_)[::3]
    assert not (a.is_contiguous() and b.is_contiguous())
    assert _error(matmul(a, b), reference_matmul(a, b)) < TOLERANCE[dtype]


@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_sizes_and_strides_divisible_by_8_not_16(layout):
    # M, N, K and the leading strides are multiples of 8 but not 16: the kernel gets DIV_* hints (vector loads
    # of 8 elements), including the wrap of edge rows/columns and the masked K tail of 40 over BLOCK_K=16.
    (m, n, k), dtype = (24, 40, 56), torch.float32
    a = _randn(k, m, dtype=dtype).t() if layout[0] == "t" else _randn(m, k, dtype=dtype)
    b = _randn(n, k, dtype=dtype).t() if layout[1] == "t" else _randn(k, n, dtype=dtype)
    hints = gemm.divisibility_hints(m, n, k, *a.stride(), *b.stride())
    assert hints["DIV_M"] == hints["DIV_N"] == hints["DIV_K"] == 8
    assert _error(matmul(a, b, config=SMALL_TILES), reference_matmul(a, b)) < TOLERANCE["fp32"]


def test_unaligned_operands_are_padded_to_16_bytes():
    a, b = _randn(37, 29, dtype=torch.bfloat16), _randn(53, 29, dtype=torch.bfloat16).t()  # K = 29: both rows odd
    pa, pb = gemm.pad_unaligned(a, b)
    assert pa.shape == (37, 32) and pb.shape == (32, 53) and pa.stride() == (32, 1) and pb.stride() == (1, 32)
    assert torch.equal(pa[:, :29], a) and not pa[:, 29:].any() and not pb[29:].any()  # zero K padding
    a_t = _randn(29, 37, dtype=torch.bfloat16).t()  # column-major A: its stride is M = 37
    pa, pb = gemm.pad_unaligned(a_t, _randn(29, 48, dtype=torch.bfloat16))
    assert pa.shape == (40, 29) and pa.stride() == (1, 40) and pb.shape == (29, 48)  # M padded, K left alone
    strided = _randn(37, 58, dtype=torch.bfloat16)[:, ::2]  # neither stride is 1: left as it is
    assert gemm.pad_unaligned(strided, _randn(29, 53, dtype=torch.bfloat16))[0] is strided


@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_padded_operands_give_the_product_with_bias_and_row_scales(layout):
    (m, n, k) = (37, 53, 29)
    a = _randn(k, m).t() if layout[0] == "t" else _randn(m, k)
    b = _randn(n, k).t() if layout[1] == "t" else _randn(k, n)
    a, b = a.to(torch.float16), b.to(torch.float16)  # 2-byte rows of 29, 37 or 53 elements: all padded
    bias = _randn(n)
    out = matmul(a, b, bias=bias, activation="relu", config=SMALL_TILES)
    assert _error(out, reference_matmul(a, b, bias=bias, activation="relu")) < TOLERANCE["fp16"]


def test_divisibility_hints_cover_only_what_triton_misses():
    hints = gemm.divisibility_hints(4096, 50257, 2008, 2008, 1, 1, 2008)
    # 4096 is divisible by 16 and a unit stride is specialised already: no hint; 50257 is odd: none possible
    assert hints == {"DIV_M": 1, "DIV_N": 1, "DIV_K": 8, "DIV_AM": 8, "DIV_AK": 1, "DIV_BK": 1, "DIV_BN": 8}
    assert gemm.divisibility_hints(12, 6, 20, 20, 1, 6, 1)["DIV_M"] == 4
    assert gemm.divisibility_hints(12, 6, 20, 20, 1, 6, 1)["DIV_N"] == 2


@pytest.mark.parametrize("k", [29, 32])  # a K tail (masked loads) and K a multiple of BLOCK_K (EVEN_K)
def test_grouped_ordering_covers_every_tile(k):
    # 16x16 tiles over 37x53: 3 x 4 tiles in groups of GROUP_M=2 tile rows; the last group is one row short.
    a, b = _randn(37, k), _randn(k, 53)
    out = matmul(a, b, config=SMALL_TILES)
    assert _error(out, reference_matmul(a, b)) < TOLERANCE["fp32"]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_bias_and_activation_epilogue(activation, dtype):
    a, b = _randn(37, 29, dtype=DTYPES[dtype]), _randn(29, 53, dtype=DTYPES[dtype])
    bias = _randn(53) * 3  # large enough to push many outputs across zero
    out = matmul(a, b, bias=bias, activation=activation)
    assert _error(out, reference_matmul(a, b, bias=bias, activation=activation)) < TOLERANCE[dtype]


def test_out_dtype_and_tf32_precision():
    a, b = _randn(37, 29, dtype=torch.float16), _randn(29, 53, dtype=torch.float16)
    out = matmul(a, b, out_dtype=torch.float32)
    assert out.dtype == torch.float32 and _error(out, reference_matmul(a, b)) < 1e-5  # no fp16 output rounding
    a, b = _randn(64, 64), _randn(64, 64)
    assert _error(matmul(a, b, precision="tf32"), reference_matmul(a, b)) < TOLERANCE["tf32"]


def test_amd_only_config_keys_are_dropped_off_hip():
    a, b = _randn(37, 29), _randn(29, 53)
    amd = dict(SMALL_TILES, waves_per_eu=2, matrix_instr_nonkdim=16, kpack=2)
    assert _error(matmul(a, b, config=amd), reference_matmul(a, b)) < TOLERANCE["fp32"]


def _fp8_operands(m, n, k, dtype=torch.float8_e4m3fn):
    a = torch.randn(m, k).to(dtype).to(DEVICE)
    b = torch.randn(n, k).to(dtype).to(DEVICE).t()  # [K, N] column-major, as torch._scaled_mm takes it
    return a, b


@pytest.mark.parametrize("scaling", ["tensor", "row", "row_2d", "mixed"])
@pytest.mark.parametrize("m,n,k", [(37, 53, 29), (64, 64, 64)])
def test_scaled_matmul_fp8(m, n, k, scaling):
    a, b = _fp8_operands(m, n, k)
    if scaling == "tensor":
        scale_a, scale_b = torch.tensor(0.7), torch.tensor(1.3)
    elif scaling == "row":
        scale_a, scale_b = torch.rand(m) + 0.5, torch.rand(n) + 0.5
    elif scaling == "row_2d":  # _scaled_mm's row-wise shapes
        scale_a, scale_b = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    else:
        scale_a, scale_b = torch.tensor(0.7), torch.rand(n) + 0.5
    scale_a, scale_b = scale_a.to(DEVICE), scale_b.to(DEVICE)
    bias = _randn(n, dtype=torch.bfloat16)
    out = scaled_matmul(a, b, scale_a, scale_b, bias=bias)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    assert _error(out, reference_scaled_matmul(a, b, scale_a, scale_b, bias=bias)) < TOLERANCE["fp8"]


def test_scaled_matmul_agrees_with_torch_scaled_mm():
    a, b = _fp8_operands(37, 53, 64)
    scale_a, scale_b = torch.tensor(0.7, device=DEVICE), torch.tensor(1.3, device=DEVICE)
    try:
        torch_out = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"torch._scaled_mm does not run here: {exc}")
    assert _error(scaled_matmul(a, b, scale_a, scale_b), torch_out.double()) < TOLERANCE["fp8"]


@pytest.mark.skipif(interpreting(), reason="the triton 3.7.1 interpreter cannot load float8_e4m3fnuz "
                    "('fail to convert fp8e4b8 to ir type'); e4m3fnuz is only checked on an MI300 (gfx942)")
def test_scaled_matmul_fp8_fnuz():
    if not torch.version.hip or amd_arch(torch.device(DEVICE)) != "gfx942":
        pytest.skip("float8_e4m3fnuz runs only on gfx942")
    a, b = _fp8_operands(64, 64, 64, torch.float8_e4m3fnuz)
    scale = torch.tensor(1.0, device=DEVICE)
    assert _error(scaled_matmul(a, b, scale, scale), reference_scaled_matmul(a, b, scale, scale)) < TOLERANCE["fp8"]


def _bad(**overrides):
    """Valid matmul arguments (a [4, 5] @ b [5, 3]) with some replaced."""
    args = dict(a=_randn(4, 5), b=_randn(5, 3))
    args.update(overrides)
    return lambda: matmul(args.pop("a"), args.pop("b"), **args)


def _bad_scaled(**overrides):
    a, b = _fp8_operands(4, 3, 32)
    args = dict(a_fp8=a, b_fp8=b, scale_a=torch.tensor(1.0, device=DEVICE), scale_b=torch.tensor(1.0, device=DEVICE))
    args.update(overrides)
    operands = [args.pop(key) for key in ("a_fp8", "b_fp8", "scale_a", "scale_b")]
    return lambda: scaled_matmul(*operands, **args)


@pytest.mark.parametrize("call,argument", [
    (lambda: _bad(b=_randn(6, 3)), "b.shape"),  # K mismatch
    (lambda: _bad(a=_randn(2, 4, 5)), "a"),  # 3-D
    (lambda: _bad(b=_randn(5)), "b"),  # 1-D
    (lambda: _bad(bias=_randn(4)), "bias"),
    (lambda: _bad(bias=_randn(1, 3)), "bias"),
    (lambda: _bad(a=_randn(4, 5, dtype=torch.float64), b=_randn(5, 3, dtype=torch.float64)), "a.dtype"),
    (lambda: _bad(a=torch.ones(4, 5, dtype=torch.int32, device=DEVICE)), "a.dtype"),
    (lambda: _bad(b=_randn(5, 3, dtype=torch.float16)), "b.dtype"),
    (lambda: _bad(a=torch.randn(4, 5).to(torch.float8_e4m3fn).to(DEVICE)), "a.dtype"),
    (lambda: _bad(activation="tanh"), "activation"),
    (lambda: _bad(precision="bf16"), "precision"),
    (lambda: _bad(out_dtype=torch.int8), "out_dtype"),
    (lambda: _bad(b=torch.empty(5, 3, device="meta")), "device"),
    (lambda: _bad(config={"BLOCK_M": 16}), "config"),
    (lambda: _bad(config=dict(SMALL_TILES, BLOCK_K=24)), "config['BLOCK_K']"),
    (lambda: _bad_scaled(a_fp8=_randn(4, 32, dtype=torch.bfloat16)), "a_fp8.dtype"),
    (lambda: _bad_scaled(scale_a=torch.tensor(1.0, dtype=torch.bfloat16, device=DEVICE)), "scale_a.dtype"),
    (lambda: _bad_scaled(scale_b=_randn(4)), "scale_b.shape"),  # [M] where [N] was due
    (lambda: _bad_scaled(scale_a=_randn(4, 3)), "scale_a.shape"),
    (lambda: _bad_scaled(bias=_randn(4)), "bias"),
])
def test_bad_inputs_name_the_argument(call, argument):
    with pytest.raises(KernelInputError) as info:
        call()()
    assert str(info.value).startswith(f"{argument}: got ")


def _shared_bytes(config: dict, dtype_bytes: int, copies: int) -> int:
    return copies * (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * dtype_bytes


@pytest.mark.parametrize("dtype_bytes", [1, 2, 4])
def test_cuda_config_space_fits_sm90_shared_memory(dtype_bytes):
    configs = config_space("cuda", dtype_bytes=dtype_bytes)
    assert 24 <= len(configs) <= 60
    assert all(_shared_bytes(c, dtype_bytes, c["num_stages"]) <= 227 * 1024 for c in configs)
    assert not any(key in c for c in configs for key in ("waves_per_eu", "matrix_instr_nonkdim", "kpack"))
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)
    default = configs[0]  # the measured best single config on the H200 (gemm_sweep.csv); tf32: bf16's tile
    expected = {1: (256, 128, 128), 2: (128, 256, 128), 4: (128, 256, 128)}[dtype_bytes]
    assert (default["BLOCK_M"], default["BLOCK_N"], default["BLOCK_K"] * dtype_bytes) == expected
    assert default["num_warps"] == 8 and default["num_stages"] in (3, 4)


@pytest.mark.parametrize("dtype_bytes", [1, 2, 4])
@pytest.mark.parametrize("arch,lds", [("gfx942", 64 * 1024), ("gfx950", 160 * 1024)])
def test_hip_config_space_fits_lds(arch, lds, dtype_bytes):
    configs = config_space("hip", arch=arch, dtype_bytes=dtype_bytes)
    assert 24 <= len(configs) <= 64
    # num_stages=2 keeps one copy of the A and B tiles in LDS (metadata.shared of triton 3.7.1 AMD builds)
    assert all(c["num_stages"] == 2 and _shared_bytes(c, dtype_bytes, 1) <= lds for c in configs)
    assert all({"waves_per_eu", "matrix_instr_nonkdim", "kpack"} <= c.keys() for c in configs)
    kpacks = {c["kpack"] for c in configs}
    assert kpacks == ({1} if arch == "gfx950" else {1, 2})
    assert {c["matrix_instr_nonkdim"] for c in configs} == {16, 32}


def test_config_space_rejects_unknown_backend_and_arch():
    with pytest.raises(KernelInputError, match="^backend"):
        config_space("metal")
    with pytest.raises(KernelInputError, match="^arch"):
        config_space("hip", arch="gfx90a")
    assert config_space("interpreter")[0]["BLOCK_M"] <= 32


def test_flops_and_bytes():
    assert flops(8192, 6144, 4096) == 2 * 8192 * 6144 * 4096
    assert bytes_moved(2, 3, 4, "bf16") == (2 * 4 + 4 * 3 + 2 * 3) * 2
    assert bytes_moved(2, 3, 4, "fp8") == (2 * 4 + 4 * 3) + 2 * 3 * 2  # fp8 operands, bf16 output
    assert bytes_moved(2, 3, 4, "tf32") == bytes_moved(2, 3, 4, "fp32") == (2 * 4 + 4 * 3 + 2 * 3) * 4
    with pytest.raises(KernelInputError, match="^dtype"):
        bytes_moved(2, 3, 4, "int4")


@pytest.mark.parametrize("suite,count", [("quick", 6), ("full", 29)])
def test_bench_cases(suite, count):
    cases = bench_cases(suite)
    assert len(cases) == count and len({(c.name, c.dtype) for c in cases}) == count
    assert {c.dtype for c in cases} == {"bf16", "fp16", "tf32", "fp8"}
    for case in cases:
        row = case.row
        assert row["op"] == "gemm" and row["dtype"] == case.dtype and min(row["m"], row["n"], row["k"]) >= 1024
        assert case.flops == flops(row["m"], row["n"], row["k"]) and case.tolerance == TOLERANCE[case.dtype]
        row_to_op({key: str(value) for key, value in row.items()}, 0)  # the predictor can read the row
    llama = [c for c in cases if c.name.startswith("llama3")]
    assert all(min(c.row["m"], c.row["n"], c.row["k"]) >= 2048 for c in llama)
    assert any(c.extra.get("activation") == "relu" for c in cases)
    names = {c.name for c in cases}
    if suite == "full":
        assert {"llama3-8b qkv 8192x6144x4096", "llama3-70b gate_up 8192x57344x8192",
                "llama3-70b down 8192x8192x28672", "recsys mlp addmm+relu 65536x1024x1024"} <= names


def test_shape_cases_build_user_gemms():
    from workbench.kernels._common import KernelInputError as Bad

    case = cases.gemm_shape_cases([{"m": 40, "n": 48, "k": 32, "dtype": "fp16"}])[0]
    assert case.row == {"op": "gemm", "m": 40, "n": 48, "k": 32, "dtype": "fp16"} and case.flops == 2 * 40 * 48 * 32
    device = "cuda" if torch.cuda.is_available() and not interpreting() else "cpu"
    inputs = case.make_inputs(device)
    out, ref = case.run(*inputs).double(), case.reference(*inputs)
    assert torch.linalg.norm(out - ref) / torch.linalg.norm(ref) <= case.tolerance
    for bad in ([{"m": 0, "n": 1, "k": 1}], [{"m": 8, "n": 8, "k": 8, "dtype": "int8"}], ["8x8x8"]):
        with pytest.raises(Bad):
            cases.gemm_shape_cases(bad)


def test_a_tma_config_runs_the_tma_kernel():
    from workbench.kernels import gemm_tma

    if not gemm_tma.supported(DEVICE if interpreting() else "cuda"):
        pytest.skip("needs triton >= 3.4 (tensor descriptors) and TRITON_INTERPRET=1 or an sm_90+ GPU")
    config = gemm_tma.config_space("interpreter")[0]
    a = torch.randn(40, 32).to(DEVICE, torch.float8_e4m3fn)
    b = torch.randn(48, 32).to(DEVICE, torch.float8_e4m3fn).t()  # column-major [K, N]
    scale_a, scale_b = torch.tensor(0.5, device=DEVICE), torch.tensor(2.0, device=DEVICE)
    ours = dispatch.triton_scaled_matmul(a, b, scale_a, scale_b, config=config)
    ref = reference_scaled_matmul(a, b, scale_a, scale_b)
    assert ((ours.double() - ref.to(ours.device)).norm() / ref.norm()).item() < TOLERANCE["fp8"]
    x, w = torch.randn(40, 32).to(DEVICE, torch.float16), torch.randn(32, 48).to(DEVICE, torch.float16)
    assert torch.allclose(dispatch.triton_matmul(x, w, config=config).float(), (x.float() @ w.float()), atol=1e-2, rtol=1e-2)
    with pytest.raises(KernelInputError, match="TMA config"):
        dispatch.triton_matmul(x, w, config=config, activation="relu")


@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_tf32_reads_both_operands_k_major(layout):
    """tf32: an N-major B (or M-major A) is copied K-major before the kernel (Hopper's wgmma reads tf32 only
    K-major); the product is unchanged, also with an unaligned K padded with zeros."""
    from workbench.kernels.gemm import _k_major_copies

    for m, n, k in ((40, 24, 32), (33, 17, 30)):
        a = _randn(k, m).t() if layout[0] == "t" else _randn(m, k)
        b = _randn(n, k).t() if layout[1] == "t" else _randn(k, n)
        pad_a, pad_b = _k_major_copies(a, b)
        k_to = -(-k // 4) * 4
        assert pad_a == (None if layout[0] == "n" and k_to == k else (m, k_to, True))
        assert pad_b == (None if layout[1] == "t" and k_to == k else (k_to, n, False))
        assert _error(matmul(a, b, precision="tf32"), reference_matmul(a, b)) < TOLERANCE["tf32"]
