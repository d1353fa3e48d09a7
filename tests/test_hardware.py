import dataclasses

import pytest

from workbench.errors import SpecError, UnknownNameError
from workbench.hardware import GPU, get_gpu, list_gpus, load_gpu

REQUIRED = ["a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "b300", "gb200", "gb300", "mi250x", "mi300x", "mi325x",
            "mi350x", "mi355x", "mi455x"]


def test_catalog_has_every_required_gpu():  # the parts; variants are listed apart
    assert sorted(g.name for g in list_gpus()) == sorted(REQUIRED)


@pytest.mark.parametrize("name", REQUIRED)
def test_every_figure_has_a_source_and_kind(name):
    gpu = get_gpu(name)
    for field, figure in gpu.figures().items():
        assert figure.source.strip(), (name, field)
        assert figure.kind in ("datasheet", "derived", "secondary", "measured", "estimate"), (name, field)
        if figure.kind == "measured":
            assert figure.how, (name, field)


def test_announced_gpu_is_marked_uncertain():
    mi455x = get_gpu("mi455x")
    assert mi455x.status == "announced" and mi455x.is_uncertain
    assert any(f.uncertain for f in mi455x.figures().values())


def test_ridge_point_is_derived_from_peak_and_bandwidth():
    h200 = get_gpu("h200")
    assert h200.ridge_point("bf16") == pytest.approx(989.4 / 4.8)
    assert get_gpu("h100-sxm").ridge_point("bf16") > h200.ridge_point("bf16")


def test_missing_precision_means_no_hardware_path():
    assert "tf32" not in get_gpu("mi355x").peak_dense_tflops  # CDNA4 dropped XF32
    assert "fp8" not in get_gpu("a100").peak_dense_tflops
    assert "fnuz" in "".join(get_gpu("mi300x").fp8_formats)


def test_lookup_is_exact_with_aliases_and_case():
    assert get_gpu("H200").name == "h200-sxm"
    assert get_gpu("MI355X").name == "mi355x"
    with pytest.raises(UnknownNameError) as err:
        get_gpu("mi35x")
    message = str(err.value)
    assert "mi355x" in message and "Did you mean" in message and "Valid GPUs" in message
    with pytest.raises(UnknownNameError):
        get_gpu("h2")  # no substring matching


def test_user_gpu_from_dict(h200_spec):
    h200_spec.update(name="my-h200-lowclock", display_name="H200 at a lower clock")
    h200_spec["peak_dense_tflops"]["bf16"]["value"] = 800
    gpu = load_gpu(h200_spec)
    assert isinstance(gpu, GPU) and gpu.peak_tflops("bf16") == 800


def test_user_gpu_from_yaml_file(tmp_path, h200_spec):
    import yaml

    path = tmp_path / "mine.yaml"
    h200_spec["name"] = "mine"
    path.write_text(yaml.safe_dump(h200_spec))
    assert load_gpu(path).name == "mine"


@pytest.mark.parametrize("edit,field,expected", [
    (lambda d: d["memory"].pop("hbm_bandwidth_tb_s"), "memory.hbm_bandwidth_tb_s", "required"),
    (lambda d: d["memory"]["hbm_bandwidth_tb_s"].update(value=-4.8), "memory.hbm_bandwidth_tb_s.value", "> 0"),
    (lambda d: d["memory"]["hbm_bandwidth_tb_s"].update(value="fast"), "memory.hbm_bandwidth_tb_s.value", "finite number"),
    (lambda d: d["memory"].update(hbm_bandwith_tb_s=dict(d["memory"]["hbm_bandwidth_tb_s"])),
     "memory.hbm_bandwith_tb_s", "no such field"),  # a copy: the same dict twice dumps as a YAML alias (refused)
    (lambda d: d["peak_dense_tflops"]["bf16"].update(source="nowhere"), "peak_dense_tflops.bf16.source", "sources"),
    (lambda d: d["peak_dense_tflops"]["bf16"].update(kind="rumour"), "peak_dense_tflops.bf16.kind", "datasheet"),
    (lambda d: d.update(vendor="intel"), "vendor", "nvidia, amd"),
    (lambda d: d.update(schema_version=2), "schema_version", "1"),
    (lambda d: d["measured"]["matmul_tflops"]["fp8"].pop("how"), "measured.matmul_tflops.fp8.how", "who measured"),
    (lambda d: d["compute_units"]["matrix_k_major_only"].update(value=["tf32", "fp12"]),
     "compute_units.matrix_k_major_only.value", "precision keys from"),
    (lambda d: d["compute_units"]["matrix_k_major_only"].update(value="tf32"),
     "compute_units.matrix_k_major_only.value", "a list of precision keys"),
])
def test_invalid_spec_names_file_field_value_and_expectation(tmp_path, h200_spec, edit, field, expected):
    import yaml

    edit(h200_spec)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(h200_spec))
    with pytest.raises(SpecError) as err:
        load_gpu(path)
    message = str(err.value)
    assert str(path) in message and field in message and expected in message


def test_unparseable_yaml_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="bad.yaml"):
        load_gpu(path)


def test_gpu_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_gpu("h200").name = "x"


def test_k_major_only_precisions_are_optional_and_sourced(h200_spec):
    h200 = get_gpu("h200")
    assert h200.reads_k_major_only("tf32") and h200.reads_k_major_only("fp8") and not h200.reads_k_major_only("bf16")
    assert "PTX" in h200.matrix_k_major_only.source
    del h200_spec["compute_units"]["matrix_k_major_only"]
    assert not load_gpu(h200_spec).reads_k_major_only("tf32")  # no document: no restriction assumed


def _figure_nodes(spec: dict, path: tuple = ()):
    """(dotted field, figure mapping) of every numeric figure in a GPU file."""
    if isinstance(spec, dict):
        if "value" in spec and "source" in spec:
            if isinstance(spec["value"], (int, float)) and not isinstance(spec["value"], bool):
                yield ".".join(path), spec
            return
        for key, value in spec.items():
            yield from _figure_nodes(value, path + (key,))


def _catalog_specs():
    import yaml

    from workbench.hardware import _catalog_dir

    return [(p.stem, yaml.safe_load(p.read_text())) for p in sorted(_catalog_dir().glob("*.yaml"))]


def test_every_numeric_figure_has_a_plausibility_bound():
    from workbench.hardware import GPU_BOUNDS

    fields = {field for _, spec in _catalog_specs() for field, _ in _figure_nodes(spec)}
    assert fields <= set(GPU_BOUNDS), sorted(fields - set(GPU_BOUNDS))
    for field, bound in GPU_BOUNDS.items():
        assert 0 < bound.low < bound.high and bound.unit and bound.reason, field


@pytest.mark.parametrize("name, spec", _catalog_specs(), ids=[n for n, _ in _catalog_specs()])
def test_a_figure_1000x_off_is_refused_naming_field_and_unit(name, spec):
    """Every catalog figure written in a unit 1000x too small (GB/s for TB/s, bytes for KB...) is out of bounds;
    1000x too large too, except fp64/fp32 peaks, whose range (1.2 to 315 TFLOP/s) is too wide to tell."""
    import copy

    from workbench.hardware import GPU_BOUNDS, gpu_from_dict

    gpu_from_dict(spec, name)  # the shipped file loads
    for field, node in _figure_nodes(spec):
        for factor in (1000, 1 / 1000):
            if factor < 1 and field.endswith((".fp64", ".fp32")):
                continue
            broken = copy.deepcopy(spec)
            target = dict(_figure_nodes(broken))[field]
            scaled = node["value"] * factor
            target["value"] = int(scaled) if isinstance(node["value"], int) and factor > 1 else scaled
            with pytest.raises(SpecError) as err:
                gpu_from_dict(broken, name)
            assert f"{field}.value" in str(err.value), str(err.value)
            if int(scaled) >= 1 or factor > 1:  # (a fraction of an integer count fails as "an integer" first)
                assert GPU_BOUNDS[field].unit in str(err.value) or "integer" in str(err.value), str(err.value)


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d["memory"]["hbm_bandwidth_tb_s"].update(value=4800), "expected 0.1..100 TB/s (is this in GB/s?)"),
    (lambda d: d["memory"]["hbm_capacity_gb"].update(value=141e9), "expected 1..10000 GB (is this in bytes?)"),
    (lambda d: d["peak_dense_tflops"]["bf16"].update(value=989.4e12), "TFLOP/s (is this in FLOP/s?)"),
    (lambda d: d["peak_dense_tflops"]["bf16"].update(value=0.9894), "TFLOP/s (is this in PFLOP/s?)"),
    (lambda d: d["compute_units"]["boost_clock_mhz"].update(value=1.98), "MHz (is this in GHz?)"),
    (lambda d: d["compute_units"]["count"].update(value=16896), "a core count"),
])
def test_unit_mistakes_name_the_likely_unit(h200_spec, edit, expected):
    edit(h200_spec)
    with pytest.raises(SpecError) as err:
        load_gpu(h200_spec)
    assert expected in str(err.value)


def test_bounds_leave_room_for_the_next_generations(h200_spec):
    """A Rubin-Ultra-class package (announced figures, rounded up) loads: the bounds are for unit mistakes."""
    h200_spec.update(name="next-gen", display_name="next generation", year=2027)
    h200_spec["peak_dense_tflops"].update(bf16=dict(h200_spec["peak_dense_tflops"]["bf16"], value=15_000),
                                          fp8=dict(h200_spec["peak_dense_tflops"]["fp8"], value=50_000),
                                          fp4=dict(h200_spec["peak_dense_tflops"]["fp8"], value=100_000))
    for key, value in (("hbm_capacity_gb", 1024), ("hbm_bandwidth_tb_s", 32), ("l2_cache_mb", 512)):
        h200_spec["memory"][key]["value"] = value
    h200_spec["compute_units"]["count"]["value"] = 640
    h200_spec["interconnect"]["scale_up_gb_s_per_direction"]["value"] = 3600
    h200_spec["interconnect"]["scale_up_domain_gpus"]["value"] = 576
    h200_spec["interconnect"]["scale_out_gb_s_per_direction"]["value"] = 400
    h200_spec["tdp_w"]["value"] = 3600
    assert load_gpu(h200_spec).peak_tflops("fp4") == 100_000


def test_cli_predict_takes_a_gpu_file(tmp_path, h200_spec, capsys):
    import yaml

    from workbench.cli import main

    h200_spec.update(name="mine", display_name="My H200")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(h200_spec))
    assert main(["predict", "--model", "llama3-8b", "--gpu", str(path), "--seq-len", "1024", "--json"]) == 0
    assert '"gpu": "mine"' in capsys.readouterr().out


# --- GPU variants (specs/gpus/variants/): a part configured differently, derived with overrides ---------------

from workbench.hardware import gpu_variant_from_dict, list_gpu_variants  # noqa: E402


def _variant(**overrides) -> dict:
    spec = {"schema_version": 1, "name": "h100-test-variant", "derived_from": "h100-sxm", "display_name": "test",
            "sources": {"test-src": "a test citation"},
            "overrides": {"memory.hbm_capacity_gb": {"value": 96, "source": "test-src", "kind": "secondary"}}}
    spec.update(overrides)
    return spec


def test_the_grand_teton_h100_is_a_variant_of_the_sxm_part():
    base, variant = get_gpu("h100-sxm"), get_gpu("h100-sxm-96gb-500w")
    assert variant.derived_from == "h100-sxm" and variant.architecture == base.architecture
    assert (variant.hbm_capacity_gb.value, variant.hbm_bandwidth_tb_s.value, variant.tdp_w.value) == (96, 2.4, 500)
    assert "torchtitan" in variant.hbm_bandwidth_tb_s.source
    assert variant.peak_dense_tflops == base.peak_dense_tflops and variant.compute_units == base.compute_units
    assert variant.measured == {}  # measured on the 700 W HBM3 part: not carried over
    assert variant.name in [v.name for v in list_gpu_variants()]
    assert variant.name not in [g.name for g in list_gpus()]  # the parts list is unchanged


def test_a_variant_overrides_only_what_it_names():
    gpu = gpu_variant_from_dict(_variant())
    base = get_gpu("h100-sxm")
    assert gpu.hbm_capacity_gb.value == 96 and gpu.hbm_capacity_gb.source == "a test citation"
    assert gpu.hbm_bandwidth_tb_s == base.hbm_bandwidth_tb_s and gpu.tdp_w == base.tdp_w


@pytest.mark.parametrize("change, field", [
    ({"derived_from": "h100-sxm5"}, "h100-sxm5"),
    ({"overrides": {"memory.hbm_capacty_gb": {"value": 96, "source": "test-src", "kind": "secondary"}}},
     "overrides.memory.hbm_capacty_gb"),
    ({"overrides": {"vendor": {"value": "amd", "source": "test-src", "kind": "secondary"}}}, "overrides.vendor"),
    ({"overrides": {"memory.hbm_capacity_gb": {"value": 96, "source": "nowhere", "kind": "secondary"}}}, "source"),
    ({"overrides": {"memory.hbm_bandwidth_tb_s": {"value": 2400, "source": "test-src", "kind": "secondary"}}}, "GB/s"),
    ({"sources": {"nv-h100": "a clash with the base's id"}}, "sources.nv-h100"),
    ({"overrides": {}}, "overrides"),
])
def test_a_bad_variant_is_refused_naming_the_field(change, field):
    with pytest.raises((SpecError, UnknownNameError)) as err:
        gpu_variant_from_dict(_variant(**change))
    assert field in str(err.value)
