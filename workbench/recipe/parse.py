"""Reading a recipe from parsed YAML/JSON: every section through typed accessors (``workbench.schema.Fields``),
anything left over rejected, then ``validate``; errors name the file, field, value and what was expected.

Every version in ``SCHEMA_VERSIONS`` reads: a field a version does not have (``lora`` in a version 1 file) is an
error naming the version that has it, and a version newer than this workbench's says to upgrade."""

from __future__ import annotations

from typing import Any

from workbench.config import DEFAULT_LORA_TARGETS
from workbench.errors import SpecError
from workbench.recipe.schema import (
    CHECKPOINT_MODES,
    COMPUTE_DTYPES,
    FP8_RECIPES,
    KERNEL_CHOICES,
    LORA_TARGET_NAMES,
    PARAM_DTYPES,
    PLACEMENTS,
    REDUCE_DTYPES,
    SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    SHARDINGS,
    ActivationCheckpointing,
    Batch,
    EmbeddingPlacement,
    KernelChoice,
    LoRAChoice,
    ModelChoice,
    ParallelismChoice,
    PrecisionPolicy,
    Predicted,
    Recipe,
    Revision,
    Target,
)
from workbench.schema import Fields


def recipe_from_dict(data: object, origin: str = "<dict>") -> Recipe:
    """``Recipe.from_dict``: read every section with typed accessors, then reject anything left over."""
    f = Fields(data, origin)
    version = _schema_version(f)
    workbench_version = f.raw("workbench_version", "") or "unknown"
    model_version = f.raw("model_version", "") or ""
    for key, value in (("workbench_version", workbench_version), ("model_version", model_version)):
        if not isinstance(value, str):
            raise f.error(key, value, "a version string")

    t = f.sub("target")
    target = Target(t.string("gpu"), _int(t, "gpus"))
    t.finish()

    m = f.sub("model")
    overrides_raw = m.raw("overrides", {}) or {}
    if not isinstance(overrides_raw, dict) or not all(isinstance(k, str) for k in overrides_raw):
        raise m.error("overrides", overrides_raw, "a mapping of model field names to values")
    ov = Fields(overrides_raw, origin, "model.overrides")
    overrides = {key: _int(ov, key) for key in overrides_raw}
    revisions = tuple(_revision(item, origin, f"model.revisions[{i}]")
                      for i, item in enumerate(_list(m, "revisions")))
    model = ModelChoice(m.string("name"), overrides, revisions)
    m.finish()

    p, dp_ = f.sub("precision", default={}), PrecisionPolicy()  # an absent key takes the schema's default
    precision = PrecisionPolicy(p.string("param_dtype", PARAM_DTYPES, default=dp_.param_dtype),
                                p.string("compute_dtype", COMPUTE_DTYPES, default=dp_.compute_dtype),
                                p.string("reduce_dtype", REDUCE_DTYPES, default=dp_.reduce_dtype),
                                p.string("fp8", FP8_RECIPES, default=dp_.fp8))
    p.finish()

    b = f.sub("batch")
    batch = Batch(_int(b, "micro_batch"), _int(b, "global_batch"), _int(b, "grad_accumulation"), _int(b, "seq_len"))
    b.finish()

    a, da = f.sub("activation_checkpointing", default={}), ActivationCheckpointing()
    layers = a.raw("layers", da.layers)
    if layers != "all":
        if not (isinstance(layers, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                 for x in layers)):
            raise a.error("layers", layers, "all, or a list of block indices (non-negative integers)")
        layers = tuple(layers)
    ac = ActivationCheckpointing(a.string("mode", CHECKPOINT_MODES, default=da.mode), layers)
    a.finish()

    q, dq = f.sub("parallelism", default={}), ParallelismChoice()
    parallelism = ParallelismChoice(_int(q, "dp", dq.dp), q.string("sharding", SHARDINGS, default=dq.sharding),
                                    _int(q, "tp", dq.tp), _int(q, "pp", dq.pp), _int(q, "cp", dq.cp),
                                    _int(q, "ep", dq.ep), _int(q, "virtual_stages", dq.virtual_stages))
    q.finish()
    lora = _lora(f, version)

    compile_ = f.boolean("compile", default=Recipe.__dataclass_fields__["compile"].default)
    kernels = tuple(_kernel(item, origin, f"kernels[{i}]") for i, item in enumerate(_list(f, "kernels")))
    embeddings = tuple(_embedding(item, origin, f"embeddings[{i}]") for i, item in enumerate(_list(f, "embeddings")))
    predicted = None
    if f.raw("predicted", None) is not None:
        d = f.sub("predicted")
        predicted = Predicted(*(float(d.number(k, minimum=0)) for k in
                                ("step_time_s", "tokens_per_s", "samples_per_s", "peak_memory_gb", "mfu",
                                 "communication_s")), fits=d.boolean("fits", default=True),
                              stack=d.string("stack", default="ideal"))
        d.finish()
    f.finish()
    try:
        return Recipe(target, model, batch, precision, ac, parallelism, lora=lora, compile=compile_, kernels=kernels,
                      embeddings=embeddings, predicted=predicted, model_version=model_version,
                      workbench_version=workbench_version)
    except SpecError as exc:  # name the file, not "<recipe>"
        raise SpecError(origin, exc.field, exc.value, exc.expected) from None


def _schema_version(f: Fields) -> int:
    """The file's ``schema_version``: one of ``SCHEMA_VERSIONS``; a newer one says this workbench is too old."""
    version = f.raw("schema_version")
    readable = " or ".join(str(v) for v in SCHEMA_VERSIONS)
    if isinstance(version, bool) or not isinstance(version, int):  # True == 1 in Python: `true` is no version
        raise f.error("schema_version", version, f"an integer, {readable} (true/false is not a version)")
    if version > SCHEMA_VERSION:
        raise f.error("schema_version", version, f"{readable}: this workbench reads recipe schema versions up to "
                      f"{SCHEMA_VERSION}; version {version} was written by a newer workbench, so upgrade it to read "
                      "this file")
    if version not in SCHEMA_VERSIONS:
        raise f.error("schema_version", version, f"{readable} (the recipe schema versions there are)")
    return version


def _lora(f: Fields, version: int) -> LoRAChoice | None:
    """The ``lora`` section (version 2 on), or None when the file has none: every weight trains."""
    if f.raw("lora", None) is None:
        return None
    if version < 2:
        raise f.error("lora", f.data["lora"], "no lora section in a schema_version 1 file (LoRA is a version 2 "
                      "field: write schema_version: 2)")
    r = f.sub("lora")
    targets = r.string_list("targets", LORA_TARGET_NAMES, default=list(DEFAULT_LORA_TARGETS))
    out = LoRAChoice(_int(r, "rank"), targets)
    r.finish()
    return out


def _int(f: Fields, key: str, default: Any = None) -> int:
    kwargs = {} if default is None else {"default": default}
    return int(f.number(key, integer=True, minimum=1, **kwargs))


def _list(f: Fields, key: str) -> list:
    value = f.raw(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise f.error(key, value, "a list (or [] for none)")
    return value


def _revision(data: object, origin: str, path: str) -> Revision:
    r = Fields(data, origin, path)
    out = Revision(r.string("name"), r.string("field"), int(r.number("old", integer=True, minimum=0)),
                   int(r.number("new", integer=True, minimum=0)), r.string("reason"),
                   float(r.number("predicted_gain", above=0)), r.boolean("requires_retraining", default=False))
    r.finish()
    return out


def _kernel(data: object, origin: str, path: str) -> KernelChoice:
    k = Fields(data, origin, path)
    shape_raw = k.raw("shape")
    if not isinstance(shape_raw, dict) or not shape_raw:
        raise k.error("shape", shape_raw, "a mapping of dimension names to sizes, e.g. {m: 4096, n: 4096, k: 4096}")
    s = Fields(shape_raw, origin, f"{path}.shape")
    shape = {str(key): _int(s, key) for key in shape_raw}
    choice = k.string("choice", KERNEL_CHOICES)
    config = k.raw("config", None)
    if config is not None and not (isinstance(config, dict) and all(isinstance(c, str) for c in config)):
        raise k.error("config", config, "a mapping of kernel meta-parameters, or null for the vendor library")
    if choice == "triton" and config is None:
        raise k.error("config", config, "the Triton config (a mapping) when choice is triton")
    out = KernelChoice(k.string("op"), shape, k.string("dtype"), choice, config,
                       float(k.number("predicted_ms", minimum=0)))
    k.finish()
    return out


def _embedding(data: object, origin: str, path: str) -> EmbeddingPlacement:
    e = Fields(data, origin, path)
    out = EmbeddingPlacement(e.string("table"), _int(e, "rows"), _int(e, "dim"), e.string("placement", PLACEMENTS),
                             _int(e, "bytes"))
    e.finish()
    return out
