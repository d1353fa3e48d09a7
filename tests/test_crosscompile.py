"""Cross-compilation of the GEMM and attention kernels for AMD (gfx942, gfx950) and NVIDIA (sm_90) on this CPU.

Runs in a fresh interpreter with TRITON_INTERPRET=0: the kernel tests of this session run Triton's interpreter,
whose kernels cannot be compiled.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")


def _inspect(code: str):
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    prelude = ("import json; from workbench.kernels import gemm, attention; "
               "from workbench.kernels.crosscompile import inspect_config, inspect_space\n")
    result = subprocess.run([sys.executable, "-c", prelude + code], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_default_gemm_and_attention_configs_compile_fit_and_do_not_spill():
    results = _inspect(
        "out = []\n"
        "for t in ('gfx942', 'gfx950', 'sm_90'):\n"
        "    b = 'hip' if t.startswith('gfx') else 'cuda'\n"
        "    g = gemm.config_space(b, **({'arch': t} if b == 'hip' else {}))[0]\n"
        "    out.append(inspect_config('gemm', g, t, 'bf16').as_dict())\n"
        "    out.append(inspect_config('attention', attention.config_space(b)[0], t, 'bf16').as_dict())\n"
        "out.append(inspect_config('gemm', gemm.config_space('hip', dtype_bytes=1)[0], 'gfx942', 'fp8').as_dict())\n"
        "out.append(inspect_config('gemm', gemm.config_space('cuda', dtype_bytes=1)[0], 'sm_90', 'fp8').as_dict())\n"
        "print(json.dumps(out))")
    assert len(results) == 8
    for r in results:
        assert not r["error"], r
        assert r["fits"] and r["spills"] == 0 and r["shared_bytes"] > 0 and r["registers"] > 0, r


def test_a_config_that_fits_mi350x_lds_but_not_mi300x_is_flagged():
    # 256x256x128 bf16 keeps one 128 KiB copy of the A and B tiles in LDS: over gfx942's 64 KiB, under gfx950's 160
    results, flagged = _inspect(
        "c = dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=2, waves_per_eu=0, "
        "matrix_instr_nonkdim=16, kpack=1)\n"
        "r, f = inspect_space('gemm', [c], ('gfx942', 'gfx950'))\n"
        "print(json.dumps([[x.as_dict() for x in r], f]))")
    by_target = {r["target"]: r for r in results}
    assert by_target["gfx942"]["shared_bytes"] > 64 * 1024 and not by_target["gfx942"]["fits"]
    assert by_target["gfx950"]["shared_bytes"] <= 160 * 1024
    assert bool(flagged) == by_target["gfx950"]["fits"]


def test_cli_inspect_prints_a_table():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    result = subprocess.run([sys.executable, "-m", "workbench.cli", "kernels", "inspect", "--kernel", "gemm",
                             "--targets", "gfx950"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "gfx950" in result.stdout and "shared_bytes" in result.stdout


def test_interpreter_mode_is_refused_clearly():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-m", "workbench.cli", "kernels", "inspect"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "TRITON_INTERPRET" in result.stderr
