"""Every export of a recipe matrix, parsed by torchtitan itself: 0.3.0's ConfigManager for torchtitan-py and
torchtitan-args, 0.2.2's for torchtitan-toml, each value checked where it lands.

torchtitan is installed once per version into ``.venv/torchtitan-<version>/`` (``tests/recipe/torchtitan_env.py``);
one subprocess per version parses the whole matrix. Without network on a developer machine the test skips; in CI
(``CI`` set) a failed install fails it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import os
import subprocess
from pathlib import Path

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import WorkbenchError
from workbench.recipe import PrecisionPolicy, dumps
from workbench.recipe.build import make_recipe, recipe_model
from workbench.recipe.torchtitan import LORA_ALPHA, LORA_MODULES, config_function_name


def _load_env_helper():
    spec = importlib.util.spec_from_file_location("torchtitan_env", Path(__file__).with_name("torchtitan_env.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


torchtitan_env = _load_env_helper()  # the tests import in importlib mode: a sibling is loaded by path

# (model, gpus, dp, tp, pp, cp, sharding)
LAYOUTS = [("llama3-8b", 1, 1, 1, 1, 1, "fsdp"), ("llama3-8b", 8, 8, 1, 1, 1, "fsdp"),
           ("llama3-8b", 8, 8, 1, 1, 1, "ddp"), ("llama3-8b", 8, 2, 1, 1, 4, "fsdp"),
           ("llama3-70b", 8, 2, 4, 1, 1, "fsdp"), ("llama3-70b", 16, 4, 2, 2, 1, "fsdp"),
           ("llama3-70b", 64, 8, 8, 1, 1, "fsdp"), ("llama3-405b", 64, 2, 8, 4, 1, "fsdp"),
           ("llama3.2-1b", 2, 2, 1, 1, 1, "fsdp")]
PRECISIONS = [("h200", "none"), ("h200", "rowwise"), ("h200", "rowwise_with_gw_hp"), ("b200", "mxfp8"),
              ("h200", "tensorwise")]
CAPABILITY = {"h200": (9, 0), "b200": (10, 0)}
FLAVORS = {"llama3-8b": "8B", "llama3-70b": "70B", "llama3-405b": "405B", "llama3.2-1b": "1B"}


def _recipe(layout, gpu, fp8, ac, compile, overrides=None):
    model, gpus, dp, tp, pp, cp, sharding = layout
    precision = PrecisionPolicy(fp8=fp8)
    cfg = TrainingConfig(2, 4096, precision.workbench_precision, Parallelism(dp=dp * cp, tp=tp, pp=pp,
                                                                             sharding=sharding),
                         ac, global_batch=dp * cp * 4)
    recipe = make_recipe(model, gpu, cfg, precision=precision, overrides=overrides or {}, compile=compile)
    if cp > 1:  # the search has no context parallelism; the recipe schema does
        recipe = dataclasses.replace(recipe, parallelism=dataclasses.replace(recipe.parallelism, dp=dp, cp=cp),
                                     batch=dataclasses.replace(recipe.batch, global_batch=dp * 4))
    return recipe


def matrix():
    """Every layout x precision, with AC mode and compile cycling so each meets each; plus layer overrides."""
    modes = itertools.cycle(itertools.product(("none", "selective", "full"), (True, False)))
    out = []
    for layout, (gpu, fp8) in itertools.product(LAYOUTS, PRECISIONS):
        ac, compile = next(modes)
        out.append(_recipe(layout, gpu, fp8, ac, compile))
    out.append(_recipe(LAYOUTS[1], "h200", "rowwise", "selective", True, {"num_layers": 4, "vocab_size": 128512}))
    out.append(_recipe(LAYOUTS[4], "h200", "none", "full", False, {"num_layers": 8}))
    # interleaved 1F1B: 80 layers in pp 2 x 2 virtual stages of 20; and context parallelism recorded by make_recipe
    out.append(make_recipe("llama3-70b", "h200", TrainingConfig(1, 4096, parallelism=Parallelism(
        dp=4, tp=2, pp=2, virtual_stages=2), global_batch=16)))
    out.append(make_recipe("llama3-8b", "h200", TrainingConfig(1, 8192, parallelism=Parallelism(dp=2, cp=4),
                                                               global_batch=8)))
    out += lora_recipes()
    return out


def lora_recipes():
    """LoRA fine-tuning: MLPerf's attention targets over DDP, the FFN's under fp8 with a layer override, a tp x pp
    layout, and k without v (which torchtitan 0.3.0 cannot adapt apart)."""
    def lora(model, parallelism, targets, rank, fp8="none", overrides=None, ac="none", compile=True):
        precision = PrecisionPolicy(fp8=fp8)
        cfg = TrainingConfig(1, 4096, precision.workbench_precision, parallelism, ac, global_batch=parallelism.dp * 2,
                             lora_rank=rank, lora_targets=targets)
        return make_recipe(model, "h200", cfg, precision=precision, overrides=overrides or {}, compile=compile)

    return [lora("llama3-8b", Parallelism(dp=8, sharding="ddp"), ("q", "k", "v", "o"), 16, ac="selective"),
            lora("llama3-8b", Parallelism(dp=1), ("o", "gate", "up", "down"), 8, "rowwise", {"num_layers": 4},
                 compile=False),
            lora("llama3-70b", Parallelism(dp=2, tp=2, pp=2, sharding="ddp"), ("q", "k", "v", "o", "down"), 64,
                 ac="full"),
            lora("llama3-8b", Parallelism(dp=1), ("q", "k"), 16)]


def _install_or_skip(version):
    try:
        return torchtitan_env.install(version)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        if os.environ.get("CI"):
            pytest.fail(f"installing torchtitan {version} failed in CI: {str(detail)[-2000:]}")
        pytest.skip(f"torchtitan {version} could not be installed (no network?): {str(detail)[-300:]}")


@pytest.fixture(scope="session")
def consumers():
    return {v: _install_or_skip(v) for v in torchtitan_env.VERSIONS}


def _export(recipe, fmt):
    try:
        return dumps(recipe, fmt), None
    except WorkbenchError as exc:
        return None, str(exc)


def _expected_refusal(recipe, fmt):
    """Why torchtitan cannot run this recipe in ``fmt`` (a substring of the WorkbenchError), or None."""
    fp8, lora = recipe.precision.fp8, recipe.lora
    if lora is not None and fmt == "torchtitan-toml":
        return "0.2.2 has no LoRA"
    if lora is not None and ("k" in lora.targets) != ("v" in lora.targets):
        return "k and v together or neither"
    if lora is not None and fmt == "torchtitan-args":
        return "torchtitan-py"
    if fmt == "torchtitan-toml":
        if recipe.model.name == "llama3.2-1b":
            return "has none for llama3.2-1b"
        if fp8 == "mxfp8" and recipe.compile and recipe.parallelism.tp > 1:
            return "TP not yet supported with torch.compile for mxfp8"
        return None
    if fp8 == "tensorwise":
        return "no tensorwise recipe"
    if fmt == "torchtitan-args" and (fp8 != "none" or recipe.model.overrides
                                     or recipe.model.name in ("llama3-405b", "llama3.2-1b")):
        return "torchtitan-py"
    return None


def _check_common(recipe, got):
    p, b, prec = recipe.parallelism, recipe.batch, recipe.precision
    assert (got["micro"], got["global_batch"], got["seq"]) == (b.micro_batch, b.global_batch, b.seq_len)
    assert got["degrees"] == [p.dp if p.sharding == "ddp" else 1, p.dp if p.sharding == "fsdp" else 1,
                              p.tp, p.pp, p.cp, p.ep]
    assert got["dtype"] == ("float32" if prec.param_dtype == "fp32" else "bfloat16")
    if p.pp > 1:  # the schedule and the split the workbench priced (pp 1 keeps the preset's pipeline settings)
        layers = -(-recipe_model(recipe).num_layers // (p.pp * p.virtual_stages)) if p.virtual_stages > 1 else None
        assert got["pipeline"] == ["Interleaved1F1B" if p.virtual_stages > 1 else "1F1B", layers, 0, 0]
    assert (got["param"], got["reduce"]) == ("bfloat16", "float32")
    assert got["flavor"] == FLAVORS[recipe.model.name]
    assert got["ac"] == recipe.activation_checkpointing.mode and got["compile"] is recipe.compile


def _check_v03(recipe, got):
    _check_common(recipe, got)
    fp8 = recipe.precision.fp8
    linear = {"none": "Linear.Config", "rowwise": "Float8Linear.Config", "rowwise_with_gw_hp": "Float8Linear.Config",
              "mxfp8": "MXFP8Linear.Config"}[fp8]
    assert got["linears"] == [linear] and got["lm_head"] == "Linear.Config"  # the output projection stays bf16
    overrides = recipe.model.overrides
    layers = {"8B": 32, "70B": 80, "405B": 126, "1B": 16}[got["flavor"]]
    assert got["layers"] == overrides.get("num_layers", layers)
    assert got["vocab"] == got["loss_vocab"] == overrides.get("vocab_size", 128256)
    assert got["async_tp"] is False and got["cuda_graphs_off"] is (recipe.parallelism.pp > 1)
    lora = recipe.lora
    if lora is None:  # every weight trains, in the presets' fused-qkv layers
        assert got["lora"] == {} and got["fused_qkv"] and not got["lm_head_frozen"]
    else:  # the adapters the workbench priced: one per targeted projection, the rest (lm_head too) frozen
        modules = {LORA_MODULES[t] for t in lora.targets}
        assert got["lora"] == {m: [[lora.rank, LORA_ALPHA]] for m in modules}
        assert got["fused_qkv"] is not any(t in lora.targets for t in ("q", "k", "v")) and got["lm_head_frozen"]
    assert got["hf_assets_path"].startswith("./assets/hf/Llama-3.")


def _check_v02(recipe, got):
    _check_common(recipe, got)
    fp8 = recipe.precision.fp8
    assert got["converters"] == {"none": [], "mxfp8": ["quantize.linear.mx"]}.get(fp8, ["quantize.linear.float8"])
    assert got["ac_option"] == "op" or got["ac"] != "selective"
    # torchtitan 0.2.2's float8.py asserts recipe_name and enable_fsdp_float8_all_gather are not both set
    assert not (got["float8_recipe"] and got["fsdp_float8_all_gather"])
    if fp8 == "tensorwise":
        assert got["float8_recipe"] is None
        assert got["fsdp_float8_all_gather"] is (recipe.parallelism.sharding == "fsdp" and recipe.parallelism.dp > 1)
    elif fp8 in ("rowwise", "rowwise_with_gw_hp"):
        assert got["float8_recipe"] == fp8
    assert got["hf_assets_path"] == {"8B": "./assets/hf/Llama-3.1-8B", "70B": "./assets/hf/Llama-3.1-70B",
                                     "405B": "./assets/hf/Llama-3.1-405B"}[got["flavor"]]
    assert got["lr"] == {"8B": 3e-4, "70B": 1.5e-4, "405B": 8e-5}[got["flavor"]]


def test_every_export_lands_in_torchtitan(consumers, tmp_path):
    recipes = matrix()
    cases = {"0.3.0": [], "0.2.2": []}
    checks = {}
    for i, recipe in enumerate(recipes):
        for fmt in ("torchtitan-py", "torchtitan-args", "torchtitan-toml"):
            text, refused = _export(recipe, fmt)
            expected = _expected_refusal(recipe, fmt)
            label = (f"{fmt} {recipe.model.name} x{recipe.target.gpus} {recipe.target.gpu} fp8={recipe.precision.fp8} "
                     f"{dataclasses.astuple(recipe.parallelism)} ac={recipe.activation_checkpointing.mode} "
                     f"compile={recipe.compile} {recipe.model.overrides}")
            if expected:
                assert refused and expected in refused, f"{label}: expected a refusal ({expected}), got {refused}"
                continue
            assert refused is None, f"{label}: {refused}"
            case_id = f"{fmt}-{i}"
            if fmt == "torchtitan-py":
                (tmp_path / f"recipe_{i}.py").write_text(text)
                argv = ["--module", f"recipe_{i}", "--config", config_function_name(recipe)]
            elif fmt == "torchtitan-args":
                argv = _args_from_line(text)
            else:
                (tmp_path / f"recipe_{i}.toml").write_text(text)
                argv = ["--job.config_file", f"recipe_{i}.toml"]
            version = "0.2.2" if fmt == "torchtitan-toml" else "0.3.0"
            cases[version].append({"id": case_id, "version": version[:3], "argv": argv,
                                   "capability": CAPABILITY[recipe.target.gpu.split("-")[0]]})
            checks[case_id] = (label, recipe, _check_v02 if version == "0.2.2" else _check_v03)
    assert len(checks) >= 83  # 51 recipes; the rest are refusals checked above
    for version, version_cases in cases.items():
        landed = torchtitan_env.parse_all(version, version_cases, tmp_path)
        for case in version_cases:
            label, recipe, check = checks[case["id"]]
            got = landed[case["id"]]
            assert "error" not in got, f"torchtitan {version} rejected {label}:\n{got.get('error')}"
            try:
                check(recipe, got)
            except AssertionError as exc:
                raise AssertionError(f"torchtitan {version}, {label}: landed {got}") from exc


def _args_from_line(text):
    """The argv that ``MODULE=m CONFIG=c ./run_train.sh FLAGS`` hands to torchtitan.train."""
    body = " ".join(line.rstrip("\\ ") for line in text.splitlines() if not line.startswith("#"))
    words = body.split()
    env = dict(w.split("=", 1) for w in words[:words.index("./run_train.sh")])
    return ["--module", env["MODULE"], "--config", env["CONFIG"], *words[words.index("./run_train.sh") + 1:]]
