"""workbench.trace (reading a Kineto trace, classifying its kernels) and workbench.stack_calibration (a stack's
profile from one trace, applied by predict(calibrated=True, stack=...)), and `workbench calibrate --trace`."""

import gzip
import json
from pathlib import Path

import pytest
import yaml

from workbench import trace as trace_module
from workbench.cli import main
from workbench.config import TrainingConfig
from workbench.errors import SpecError, WorkbenchError
from workbench.fileio import InputFileError, OutputExistsError
from workbench.predict import predict
from workbench.stack_calibration import (
    GROUP_OF,
    StackFit,
    fit_trace,
    load_stack_profile,
    user_stack_profile_path,
    write_stack_profile,
)
from workbench.hardware import get_gpu
from workbench.trace import (
    CLASSES, class_frame, class_table, classify, idle_split, load_trace, op_class, parse_trace, trace_from_bytes,
)

REPO = Path(__file__).resolve().parents[1]
PLAIN_TRACE = REPO / "benchmarks/results/h200/stacks/plain_pytorch/traces/1b-mb3-s2048-fp32-eager-none.json.gz"
H200 = get_gpu("h200")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh user folder: profiles are written there and read before the shipped ones."""
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    monkeypatch.delenv("WORKBENCH_CALIBRATION_DIR", raising=False)
    return tmp_path


@pytest.mark.parametrize("name, expected", [
    # NVIDIA: cuBLAS / cuBLASLt, CUTLASS, flash / cuDNN attention, NCCL
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", "gemm"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(Params)", "gemm"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>", "attention_fwd"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>", "attention_bwd"),
    ("void cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple>>>",
     "attention_fwd"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     "attention_fwd"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
     "attention_bwd"),
    ("void cudnn::fusion::fmha_reduce_head<true>(void const*, void*, unsigned int)", "attention_bwd"),
    ("fmha_cutlassB_bf16_aligned_64x64_k128_sm80", "attention_bwd"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    # AMD: hipBLASLt / Tensile, CK, aiter, RCCL
    ("Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI32x32x8x1_SN_1LDSB1_GRVW8_K1_MIWT4_4", "gemm"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>>",
     "gemm"),
    ("_ZN5aiter41fmha_fwd_hd128_bf16_causal_rtz_group_a32_psskE", "attention_fwd"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    # TransformerEngine
    ("void transformer_engine::normalization::rmsnorm_fwd_tuned_kernel<Kernel_traits<float, bf16>>", "norm"),
    ("void transformer_engine::cast_transpose_fusion_kernel_optimized<8, 4, float, __nv_fp8_e4m3>", "fp8_quantize"),
    # inductor (Triton)
    ("triton_per_fused__fused_rms_norm__fused_rms_norm_backward__to_copy__unsafe_view_add_view_6", "norm"),
    ("triton_poi_fused__unsafe_view_mul_silu_9", "activation"),
    ("triton_poi_fused__unsafe_view_add_cat_mul_split_sub_transpose_view_4", "rope"),
    ("triton_red_fused__log_softmax__to_copy_prepare_softmax_online_view_0", "cross_entropy"),
    ("triton_poi_fused__to_copy_t_8", "copy_cast"),
    ("triton_tem_fused_mm_0", "gemm"),
    # ATen
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, true>(int, float)", "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >",
     "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)",
     "copy_cast"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::silu_kernel()", "activation"),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>>>>", "reduction"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>",
     "optimizer"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, LogSoftMaxForwardEpilogue>",
     "cross_entropy"),
    ("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
     "embedding_fwd"),
    ("void at::native::(anonymous namespace)::compute_grad_weight<float, long>(long const*, float const*)",
     "embedding_bwd"),
    ("Memset (Device)", "copy_cast"),
    ("Memcpy DtoD (Device -> Device)", "copy_cast"),
    ("my_custom_kernel_v2", "other"),
])
def test_real_kernel_names_get_their_class(name, expected):
    assert classify(name) == expected


def _event(name, ts, dur, cat="kernel", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def tiny_trace(steps=2, annotate=True) -> dict:
    """``steps`` steps of four kernels (a GEMM, an add, a memset and one no rule knows), 1 ms apart."""
    events, t = [], 0.0
    for step in range(steps):
        start = t
        for name, dur in (("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", 600.0),
                          ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", 100.0),
                          ("Memset (Device)", 10.0), ("my_custom_kernel_v2", 40.0)):
            events.append(_event(name, t, dur, "gpu_memset" if name.startswith("Memset") else "kernel"))
            t += dur + 50.0
        if annotate:
            events.append(_event(f"ProfilerStep#{step + 3}", start, t - start + 100, "user_annotation"))
        t += 100.0
    return {"schemaVersion": 1, "deviceProperties": [{"name": "NVIDIA H200"}], "traceEvents": events}


def test_reads_json_and_json_gz(tmp_path):
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_text(json.dumps(tiny_trace()))
    packed.write_bytes(gzip.compress(json.dumps(tiny_trace()).encode()))
    for path in (plain, packed):
        t = load_trace(path)
        assert t.steps == 2 and t.steps_from.startswith("2 ProfilerStep")
        assert t.device == "NVIDIA H200" and len(t.kernels) == 8
        assert t.kernel_ms_per_step == pytest.approx(0.75)
        assert t.wall_ms_per_step == pytest.approx((4 * 50 + 750 + 100) / 1e3)
        assert t.unknown_kernels == [("my_custom_kernel_v2", pytest.approx(0.04))]  # listed, never dropped
        by_class = {r.cls: r for r in class_table(t)}
        assert by_class["gemm"].measured_ms == pytest.approx(0.6) and by_class["other"].measured_kernels == 1
        assert sum(r.measured_ms for r in by_class.values()) == pytest.approx(t.kernel_ms_per_step)


def test_steps_come_from_the_caller_without_annotations(tmp_path):
    doc = tiny_trace(annotate=False)
    with pytest.raises(WorkbenchError, match="--steps"):
        parse_trace(doc, "t.json")
    t = parse_trace(doc, "t.json", steps=2)
    assert t.steps_from == "given" and t.kernel_ms_per_step == pytest.approx(0.75)
    with pytest.raises(WorkbenchError, match="mark 2 step"):
        parse_trace(tiny_trace(), "t.json", steps=3)


@pytest.mark.parametrize("content, message", [
    (b"not json at all", "expected valid JSON"),
    (b"[1, 2, 3]", "JSON list: expected a torch.profiler chrome trace"),
    (b'{"schemaVersion": 1}', "without traceEvents"),
    (json.dumps({"traceEvents": [_event("aten::mm", 0, 5, "cpu_op")]}).encode(), "has no GPU kernel events"),
    (json.dumps({"traceEvents": [_event("k", "soon", 5)]}).encode(), "ts = 'soon': expected a number"),
])
def test_bad_input_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(InputFileError, match=message) as info:
        load_trace(path, steps=1)
    assert str(path) in str(info.value)


def test_truncated_or_fake_gzip_and_a_too_large_trace(tmp_path, monkeypatch):
    data = gzip.compress(json.dumps(tiny_trace()).encode())
    (tmp_path / "cut.json.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFileError, match="ends early"):
        load_trace(tmp_path / "cut.json.gz")
    (tmp_path / "fake.json.gz").write_text("{}")
    with pytest.raises(InputFileError, match="not gzip data"):
        load_trace(tmp_path / "fake.json.gz")
    (tmp_path / "big.json.gz").write_bytes(data)
    (tmp_path / "big.json").write_text(json.dumps(tiny_trace()))
    monkeypatch.setattr(trace_module, "TRACE_MAX_BYTES", 1000)
    with pytest.raises(InputFileError, match="inflates to more than"):
        load_trace(tmp_path / "big.json.gz")
    with pytest.raises(InputFileError, match="limit for a trace"):
        load_trace(tmp_path / "big.json")



def test_trace_from_bytes_reads_an_upload_as_load_trace_reads_the_file(tmp_path, monkeypatch):
    """The bytes entry point (a notebook upload) gives what the file gives, with the upload's name in errors."""
    text = json.dumps(tiny_trace()).encode()
    (tmp_path / "t.json").write_bytes(text)
    from_file = load_trace(tmp_path / "t.json")
    for data in (text, gzip.compress(text), memoryview(gzip.compress(text))):
        t = trace_from_bytes(data, "upload.json")
        assert t.origin == "upload.json" and t.steps == 2 and t.kernels == from_file.kernels
    assert trace_from_bytes(json.dumps(tiny_trace(annotate=False)).encode(), "u.json", steps=2).steps_from == "given"
    for data, message in ((b"", "is empty"), (b"<html>", "expected valid JSON"), (b"{}", "without traceEvents"),
                          ("{}", "expected the bytes")):
        with pytest.raises(InputFileError, match=message) as info:
            trace_from_bytes(data, "upload.json")
        assert "upload.json" in str(info.value)
    with pytest.raises(InputFileError, match="not gzip data"):
        trace_from_bytes(b"{}", "upload.json.gz")
    monkeypatch.setattr(trace_module, "TABLE_MAX_BYTES", 10)
    with pytest.raises(InputFileError, match="limit for a chrome trace"):
        trace_from_bytes(text, "upload.json")

def test_every_model_op_of_a_stack_step_has_a_class():
    p = predict("llama3.2-1b", "h200", TrainingConfig(1, 2048, activation_checkpointing="full"), stack="pytorch-eager")
    classes = {op_class(o.op) for o in p.ops}
    assert classes <= set(CLASSES) and "other" not in classes
    assert {"gemm", "attention_fwd", "attention_bwd", "norm", "optimizer", "cross_entropy"} <= classes
    frame = class_frame(class_table(load_trace(PLAIN_TRACE, steps=2), p))
    assert {"class", "measured_ms", "predicted_ms", "ratio"} <= set(frame.columns)


def synthetic_trace(prediction, factors: dict[str, float], idle_us: float) -> dict:
    """One annotated step whose kernels take ``factors[group]`` x the prediction's time of each group."""
    names = {"gemm": "nvjet_sm90_tst_x", "attention_fwd": "flash_fwd_kernel", "attention_bwd": "flash_bwd_kernel",
             "norm": "vectorized_layer_norm_kernel", "cross_entropy": "cunn_SoftMaxForward",
             "pointwise": "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>",
             "embedding": "vectorized_gather_kernel", "optimizer": "multi_tensor_apply_kernel<FusedAdamMathFunctor>"}
    per_group: dict[str, float] = {}
    for o in prediction.ops:
        group = GROUP_OF[op_class(o.op)]
        per_group[group] = per_group.get(group, 0.0) + o.total_s * 1e6
    events, t = [], 0.0
    for group, us in per_group.items():
        events.append(_event(names[group], t, us * factors.get(group, 1.0)))
        t += us * factors.get(group, 1.0)
    events.append(_event("ProfilerStep#1", 0.0, t + idle_us, "user_annotation"))
    return {"traceEvents": events}


def test_fit_recovers_known_factors_and_predict_applies_them(home):
    cfg = TrainingConfig(2, 4096)
    base = predict("llama3.2-1b", "h200", cfg, stack="pytorch-eager", calibrated=True)
    factors = {"gemm": 0.8, "attention_bwd": 1.3, "pointwise": 1.1}
    trace = parse_trace(synthetic_trace(base, factors, idle_us=2000.0), "synthetic")
    fit = fit_trace(trace, "llama3.2-1b", "h200", cfg, stack="pytorch-eager")
    for group, factor in factors.items():
        assert fit.profile.scales[group] == pytest.approx(factor, rel=1e-6)
    assert fit.profile.scales["norm"] == pytest.approx(1.0, rel=1e-6)
    # the idle sits after the step's last kernel: step boundary, not in-step idle
    assert fit.profile.step_gap_ms == pytest.approx(2.0) and fit.profile.idle_gap_ms == pytest.approx(0.0)
    assert fit.profile.base == "calibrated"
    path = write_stack_profile(fit.profile)
    assert Path(path) == user_stack_profile_path("pytorch-eager", H200) and str(home) in path
    after = predict("llama3.2-1b", "h200", cfg, stack="pytorch-eager", calibrated=True)
    assert after.calibrated and any("stack profile" in n for n in after.notes)
    assert after.summary.step_time_s * 1e3 == pytest.approx(fit.calibrated_step_ms, rel=1e-9)
    assert after.summary.step_time_s * 1e3 == pytest.approx(trace.wall_ms_per_step, rel=0.01)  # roofline clamps
    # not applied: uncalibrated, another stack, a bound
    assert predict("llama3.2-1b", "h200", cfg, stack="pytorch-eager").summary.step_time_s != after.summary.step_time_s
    compiled = predict("llama3.2-1b", "h200", cfg, stack="pytorch-compile", calibrated=True)
    assert not any("stack profile" in n for n in compiled.notes)
    ideal = predict("llama3.2-1b", "h200", cfg, calibrated=True)
    assert not any("stack profile" in n for n in ideal.notes)
    with pytest.raises(OutputExistsError, match="--force"):  # no clobber without asking
        write_stack_profile(fit.profile)
    write_stack_profile(fit.profile, overwrite=True)


def test_a_profile_with_a_bad_field_names_it(home):
    path = user_stack_profile_path("pytorch-eager", H200)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"schema_version": 1, "stack": "pytorch-eager", "gpu": "h200-sxm",
                                    "compiled": False, "base_constants": "spec", "scales": {"gemmm": 0.9},
                                    "idle_gap_ms": 0, "unmatched_ms": 0, "classes": ["gemm"]}))
    with pytest.raises(SpecError, match="scales.gemmm"):
        load_stack_profile("pytorch-eager", H200)


def test_cli_calibrates_from_the_committed_plain_loop_trace(home, capsys):
    args = ["calibrate", "--trace", str(PLAIN_TRACE), "--stack", "pytorch-eager", "--model", "llama3.2-1b",
            "--micro-batch", "3", "--seq-len", "2048", "--steps", "2", "--param-dtype", "fp32"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "gemm" in out and "calibrated" in out and "wrote" in out and str(home) in out
    profile = load_stack_profile("pytorch-eager", H200)
    assert profile is not None and 0.5 < profile.scales["gemm"] < 1.5  # the traced run's GEMMs vs the model's
    assert profile.fitted_on["micro_batch"] == 3 and profile.fitted_on["steps"] == 2
    assert main(args) == 2 and "--force" in capsys.readouterr().err  # an existing profile is kept
    assert main([*args, "--force"]) == 0
    assert main(["calibrate", "--trace", str(PLAIN_TRACE), "--stack", "pytorch-eager"]) == 2
    assert "--model, --micro-batch, --seq-len" in capsys.readouterr().err


def test_a_trace_profile_alone_calibrates_a_gpu_without_a_gpu_profile(home):
    # the H100 ships no calibration profile: calibrated=True used to fail even after `calibrate --trace` wrote one
    cfg = TrainingConfig(2, 4096)
    with pytest.raises(WorkbenchError, match="no calibration profile"):
        predict("llama3.2-1b", "h100", cfg, stack="pytorch-eager", calibrated=True)
    base = predict("llama3.2-1b", "h100", cfg, stack="pytorch-eager")
    trace = parse_trace(synthetic_trace(base, {"gemm": 0.9}, idle_us=1000.0), "synthetic")
    fit = fit_trace(trace, "llama3.2-1b", "h100", cfg, stack="pytorch-eager")
    assert fit.profile.base == "spec"
    write_stack_profile(fit.profile)
    after = predict("llama3.2-1b", "h100", cfg, stack="pytorch-eager", calibrated=True)
    assert after.calibrated and after.summary.step_time_s * 1e3 == pytest.approx(fit.calibrated_step_ms, rel=1e-9)
    with pytest.raises(WorkbenchError, match="no calibration profile"):  # another stack has no profile: still an error
        predict("llama3.2-1b", "h100", cfg, stack="pytorch-compile", calibrated=True)


def test_a_trace_fit_is_over_the_stacks_own_gemm_factors(home):
    # megatron carries gemm_fraction_scale.fp8.blackwell (Stack.gemm_constants), which a calibrated prediction
    # applies: the fit must price the traced step with it too, or the factor counts twice
    cfg = TrainingConfig(2, 4096, precision="fp8")
    base = predict("llama3.2-1b", "b200", cfg, stack="megatron")
    trace = parse_trace(synthetic_trace(base, {"gemm": 0.9}, idle_us=1000.0), "synthetic")
    fit = fit_trace(trace, "llama3.2-1b", "b200", cfg, stack="megatron")
    assert fit.profile.scales["gemm"] == pytest.approx(0.9, rel=1e-6)
    write_stack_profile(fit.profile)
    after = predict("llama3.2-1b", "b200", cfg, stack="megatron", calibrated=True)
    assert after.summary.step_time_s * 1e3 == pytest.approx(fit.calibrated_step_ms, rel=1e-9)


def test_idle_split_separates_the_step_boundary_from_the_in_step_idle():
    # one step range 0..10 ms: kernels 1-3 ms and 4-9 ms: 1 ms before, 1 ms after, 1 ms between
    events = [_event("nvjet_sm90_tst_a", 1000.0, 2000.0), _event("nvjet_sm90_tst_b", 4000.0, 5000.0),
              _event("ProfilerStep#3", 0.0, 10000.0, "user_annotation")]
    split = idle_split(parse_trace({"traceEvents": events}, "ranges"))
    assert split.step_gap_ms == pytest.approx(2.0) and split.in_step_ms == pytest.approx(1.0)
    assert "ProfilerStep" in split.how


def test_idle_split_of_back_to_back_steps_keeps_the_first_steps_idle():
    # two steps of two kernels, no ranges: the first waits 3 ms between its kernels (an empty queue), the second 1 ms
    events = [_event("nvjet_a", 0.0, 1000.0), _event("nvjet_b", 4000.0, 1000.0),
              _event("nvjet_a", 5000.0, 1000.0), _event("nvjet_b", 7000.0, 1000.0)]
    trace = parse_trace({"traceEvents": events}, "back-to-back", steps=2)
    assert trace.idle_ms_per_step == pytest.approx(2.0)  # the average the profile kept before
    split = idle_split(trace)
    assert split.in_step_ms == pytest.approx(3.0) and split.step_gap_ms == pytest.approx(0.0)
    one = idle_split(parse_trace({"traceEvents": events[:3]}, "uneven", steps=2))  # 3 kernels, 2 steps: no split
    assert one.step_gap_ms == 0.0 and "wall minus busy" in one.how


def test_the_step_boundary_applies_in_both_modes_and_to_a_host_bound_step(home):
    cfg = TrainingConfig(2, 4096)
    base = predict("llama3.2-1b", "h200", cfg, stack="pytorch-eager", calibrated=True)
    trace = parse_trace(synthetic_trace(base, {}, idle_us=3000.0), "synthetic")
    profile = fit_trace(trace, "llama3.2-1b", "h200", cfg, stack="pytorch-eager").profile
    profile = type(profile)(**{**profile.__dict__, "idle_gap_ms": 1.0})
    same, other = StackFit(profile, compiled=False), StackFit(profile, compiled=True)
    assert same.idle_gap_s == pytest.approx(4e-3) and other.idle_gap_s == pytest.approx(3e-3)
    assert other.host_s(0.050) == pytest.approx(0.053)  # a host-bound step waits for the boundary too


def test_a_host_bound_trace_keeps_no_kernel_factors(home):
    cfg = TrainingConfig(2, 4096)
    base = predict("llama3.2-1b", "h200", cfg, stack="pytorch-eager", calibrated=True)
    doc = synthetic_trace(base, {"gemm": 0.8}, idle_us=0.0)
    kernels = [e for e in doc["traceEvents"] if e["cat"] == "kernel"]
    for i, e in enumerate(kernels):  # 30 ms of waiting between the kernels of a ~150 ms step
        e["ts"] += 30000.0 * i / len(kernels)
    step = [e for e in doc["traceEvents"] if e["cat"] == "user_annotation"][0]
    step["dur"] = max(e["ts"] + e["dur"] for e in kernels)
    fit = fit_trace(parse_trace(doc, "host-bound"), "llama3.2-1b", "h200", cfg, stack="pytorch-eager")
    assert fit.profile.scales == {} and fit.profile.idle_gap_ms == 0.0
    assert "host-bound" in fit.profile.skipped["gemm"] and "idle_gap" in fit.profile.skipped
    assert fit.in_step_idle_ms == pytest.approx(30.0 * (len(kernels) - 1) / len(kernels))


def test_a_profile_without_a_step_gap_reads_as_zero(home):
    path = user_stack_profile_path("pytorch-eager", H200)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"schema_version": 1, "stack": "pytorch-eager", "gpu": "h200-sxm",
                                    "compiled": False, "base_constants": "spec", "scales": {"gemm": 0.9},
                                    "idle_gap_ms": 1.5, "unmatched_ms": 0, "classes": ["gemm"]}))
    profile = load_stack_profile("pytorch-eager", H200)
    assert profile.step_gap_ms == 0.0 and profile.idle_gap_ms == 1.5
    assert "step_gap_ms" in profile.as_document()
