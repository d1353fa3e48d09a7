"""Co-design advisor: port a training setup from a source GPU to a target GPU, and say what to change and why.

    >>> advice = advise("llama3-8b", "h100-sxm", "h200-sxm", gpus=1, overrides={"num_layers": 4})
    >>> advice.direct_port.predicted.tokens_per_s, advice.co_designed.predicted.tokens_per_s, advice.gain
    >>> advice.as_frame()              # side by side, for the widget

* **direct port**: the best recipe for the *source* GPU (``search``), run unchanged on the target and predicted there
  (it may not fit: ``direct_port.predicted.fits``).
* **co-designed**: the best recipe for the *target*, after applying the structural revisions that keep the model's
  math (zero-padded vocabulary and FFN widths) when the model predicts they pay.
* **revisions**: every change between the two, each with its gain predicted by the core model (never a fixed
  factor): applied model revisions, recipe changes (parallel layout, checkpointing, micro-batch with accumulation,
  precision) as successive steps from the direct port to the co-designed recipe, and proposals that change the
  model's math (hidden size, head_dim, GQA groups): reported with gains, marked ``requires_retraining``, never
  applied.

Both sides train the same run: one global batch (the caller's, else ``search.default_global_batch``) for the
source, the direct port and the co-designed recipe, so no gain comes from changing it. Every gain is reported with
``GAIN_UNCERTAINTY``; one inside it is "no measurable gain" (``gain_verdict``), in the text and in ``as_dict``.

What runs the recipes and how the GPUs are split can be held too (the widget passes its controls):

    >>> advise("llama3-70b", "h100-sxm", "b200", 16, stack="torchtitan", tp=2, pp=2, sharding="fsdp")

``stack`` and ``param_dtype`` price every recipe as that stack runs it (``search(stack=, param_dtype=)``; None: the
model's default stack, as ``search``'s: ``torchtitan`` for a transformer, the ``ideal`` bound for DLRM and HSTU);
each of ``tp``, ``pp``, ``cp``, ``ep``, ``virtual_stages`` and ``sharding`` given is held on the source, the direct
port and the co-designed recipe alike (``held_layouts``), and what is left None the search chooses; ``lora_rank``
(with ``lora_targets``) prices LoRA fine-tuning on every side, and every recipe records it (``Recipe.lora``).
``Advice.held`` lists what was held.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from workbench.config import DEFAULT_LORA_TARGETS, Parallelism, TrainingConfig, default_seq_len
from workbench.errors import SpecError, WorkbenchError
from workbench.families import family_of
from workbench.hardware import GPU, get_gpu
from workbench.memory import GB, HEADROOM_FRACTION
from workbench.models import Model, TransformerModel, get_model
from workbench.predict import predict
from workbench.recipe.build import make_recipe, revised_model
from workbench.recipe.schema import PrecisionPolicy, Recipe, Revision
from workbench.recipe.search import (
    IDEAL, STEP_TIME_UNCERTAINTY, Candidate, StepEvaluator, default_global_batch, layouts, search,
)
from workbench.stacks import default_stack, get_stack

if TYPE_CHECKING:
    import pandas as pd

PAD_MULTIPLES = (64, 128, 256)
"""Widths tried when padding a dimension: GEMM tile edges of the vendor libraries' menus (``workbench.perf.gemm``)."""
MIN_GAIN = 1.001
"""A revision is applied (or proposed) only when the model predicts at least a 0.1% faster step; a policy. Whether
the gain is measurable is ``gain_verdict``'s call, reported beside it."""
GAIN_UNCERTAINTY = STEP_TIME_UNCERTAINTY
"""Relative uncertainty of a predicted gain (new / old throughput): the step model's own
(``search.STEP_TIME_UNCERTAINTY``, 5%, from the H200 stacks evaluation), taken whole for the ratio. Conservative:
both predictions share the GPU and the model, so much of their error cancels in the ratio."""
Verdict = Literal["gain", "loss", "no measurable gain"]


def gain_verdict(gain: float | None, uncertainty: float = GAIN_UNCERTAINTY) -> Verdict | None:
    """"gain" when ``gain`` >= 1 + ``uncertainty``, "loss" when <= 1 - ``uncertainty``, else "no measurable gain"
    (the model cannot tell it from no change); None without a gain."""
    if gain is None or math.isnan(gain):
        return None
    if gain >= 1 + uncertainty:
        return "gain"
    if gain <= 1 - uncertainty:
        return "loss"
    return "no measurable gain"


def gain_text(gain: float | None, uncertainty: float = GAIN_UNCERTAINTY) -> str:
    """``x1.030 +/- 5%: no measurable gain``, the way the CLI and the widget write a gain."""
    verdict = gain_verdict(gain, uncertainty)
    if verdict is None:
        return "no prediction"
    return f"x{gain:.3f} +/- {uncertainty:.0%}: {verdict}"


SPLIT_FIELDS: tuple[str, ...] = ("tp", "pp", "cp", "ep", "virtual_stages")
"""The ``Parallelism`` degrees ``advise`` can hold (``held_layouts``); ``sharding`` is held through the search's
``shardings``."""


@dataclass(frozen=True)
class Pricing:
    """How the advisor prices every recipe: the stack that runs it (None: the fused-step bound, ``ideal``), its
    parameter dtype (None: the stack's default) and the GPU's calibration profile."""

    stack: str | None = None
    param_dtype: str | None = None
    calibrated: bool = False

    @property
    def is_default(self) -> bool:
        """Nothing named: the fused-step bound at its default dtype, each recipe predicted by ``make_recipe``."""
        return self.stack is None and self.param_dtype is None

    def evaluator(self, model: Model, gpu: GPU) -> StepEvaluator:
        return StepEvaluator(model, gpu, self.stack or IDEAL, calibrated=self.calibrated, param_dtype=self.param_dtype)

    def recipe(self, name: str, gpu: GPU, candidate: Candidate, overrides: Mapping[str, int],
               revisions: Sequence[Revision] = ()) -> Recipe:
        """``candidate``'s configuration as a recipe on ``gpu``, predicted as this pricing prices it (with the
        candidate's compile flag where a stack is named)."""
        if self.is_default:
            return make_recipe(name, gpu, candidate.config, overrides=overrides, revisions=revisions,
                               calibrated=self.calibrated, stack=IDEAL)
        model = revised_model(name, dict(overrides))
        cfg = candidate.config.resolved(model)
        dtype = get_stack(self.stack or IDEAL).param_dtype(self.param_dtype)
        prediction = predict(model, gpu, cfg, calibrated=self.calibrated, stack=self.stack or IDEAL,
                             compile=candidate.compile, param_dtype=dtype)
        policy = replace(PrecisionPolicy.for_precision(cfg.precision), param_dtype=dtype)
        return make_recipe(name, gpu, cfg, overrides=overrides, revisions=revisions, compile=candidate.compile,
                           precision=policy, prediction=prediction, calibrated=self.calibrated)


def held_layouts(model: Model, gpu: GPU, gpus: int, split: Mapping[str, int]) -> list[Parallelism] | None:
    """The layouts of ``gpus`` GPUs the search may try with the degrees in ``split`` held (``SPLIT_FIELDS``; e.g.
    ``{"tp": 2, "cp": 2}``), each checked by the core (tp dividing the heads, pp at most the layers, ep dividing
    dp x cp, ...); None when nothing is held (every layout ``search.layouts`` gives), [] when none is valid. The
    layouts are ``search.layouts`` of ``gpus / cp`` GPUs, given the held cp, ep and virtual stages."""
    if not split:
        return None
    cp = split.get("cp", 1)
    if gpus % cp:
        return []
    out: dict[Parallelism, None] = {}
    for base in layouts(model, gpu, gpus // cp):
        p = replace(base, cp=cp, ep=split.get("ep", base.ep), virtual_stages=split.get("virtual_stages", 1))
        if any(getattr(p, name) != value for name, value in split.items()):
            continue
        try:
            TrainingConfig(1, parallelism=p).resolved(model)
        except SpecError:
            continue
        out[p] = None
    return list(out)


def _split_text(split: Mapping[str, object]) -> str:
    return ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in split.items())


@dataclass(frozen=True)
class AdviceItem:
    """One difference between the direct port and the co-designed recipe, or a proposal."""

    kind: Literal["model", "recipe", "placement", "proposal"]
    name: str
    field: str
    old: object
    new: object
    reason: str
    predicted_gain: float
    """Predicted throughput ratio (new / old) of this change alone, from the core model."""
    applied: bool
    """True when the co-designed recipe includes it; proposals are never applied."""
    requires_retraining: bool = False
    """The change alters the model's function: validate quality by training before adopting it."""
    uncertainty: float = GAIN_UNCERTAINTY
    """Relative uncertainty of ``predicted_gain``."""

    @property
    def verdict(self) -> Verdict | None:
        """``gain_verdict`` of ``predicted_gain``: "no measurable gain" inside ``uncertainty``."""
        return gain_verdict(self.predicted_gain, self.uncertainty)

    def as_dict(self) -> dict:
        """The fields plus ``verdict`` and ``gain_text``, for the widget and the CLI table."""
        return {**self.__dict__, "verdict": self.verdict,
                "gain_text": gain_text(self.predicted_gain, self.uncertainty)}


@dataclass(frozen=True)
class Advice:
    model: str
    source_gpu: str
    target_gpu: str
    gpus: int
    precision: str
    source: Recipe | None
    """The best recipe for the source GPU, on the source (None when nothing fits there)."""
    direct_port: Recipe | None
    """``source`` run unchanged on the target GPU."""
    co_designed: Recipe
    revisions: tuple[AdviceItem, ...]
    notes: tuple[str, ...] = ()
    stack: str = IDEAL
    """The stack every recipe is priced for (``ideal``: the fused-step bound); the model's default when
    ``advise`` names none."""
    held: Mapping[str, object] = field(default_factory=dict)
    """What the caller held on both sides beyond the model, GPU count, precision, sequence and global batch: the
    stack, parameter dtype, parallel degrees and sharding given to ``advise`` (empty: all searched)."""
    configs: tuple[TrainingConfig | None, TrainingConfig] | None = None
    """(direct port, co-designed) configurations as priced (the recipes record the same, LoRA included)."""

    @property
    def gain(self) -> float | None:
        """Predicted co-designed / direct-port throughput on the target (None without a direct port). Both hold the
        same global batch, so this is also the ratio of their step times."""
        if self.direct_port is None or self.direct_port.predicted is None or self.co_designed.predicted is None:
            return None
        return self.co_designed.predicted.tokens_per_s / self.direct_port.predicted.tokens_per_s

    @property
    def gain_uncertainty(self) -> float:
        return GAIN_UNCERTAINTY

    @property
    def gain_verdict(self) -> Verdict | None:
        """``gain_verdict`` of ``gain``: "no measurable gain" when co-designing is inside the model's uncertainty."""
        return gain_verdict(self.gain, self.gain_uncertainty)

    @property
    def gain_text(self) -> str:
        return gain_text(self.gain, self.gain_uncertainty)

    def as_dict(self) -> dict:
        """Plain data for the widget: both recipes, the side-by-side rows, revisions (each with its ``verdict``)
        and notes; ``gain`` with ``gain_uncertainty`` and ``gain_verdict``."""
        return {"model": self.model, "source_gpu": self.source_gpu, "target_gpu": self.target_gpu, "gpus": self.gpus,
                "precision": self.precision, "stack": self.stack, "held": dict(self.held), "gain": self.gain,
                "gain_uncertainty": self.gain_uncertainty, "gain_verdict": self.gain_verdict,
                "gain_text": self.gain_text, "notes": list(self.notes),
                "source": self.source.to_dict() if self.source else None,
                "direct_port": self.direct_port.to_dict() if self.direct_port else None,
                "co_designed": self.co_designed.to_dict(), "side_by_side": self.rows(),
                "revisions": [item.as_dict() for item in self.revisions]}

    def rows(self) -> list[dict]:
        """One row per setting or prediction: direct port vs co-designed."""
        def cells(recipe: Recipe | None) -> dict:
            if recipe is None:
                return {}
            p, b, pred = recipe.parallelism, recipe.batch, recipe.predicted
            layout = (f"dp{p.dp} ({p.sharding}) tp{p.tp} pp{p.pp} ep{p.ep}{f' cp{p.cp}' if p.cp > 1 else ''}"
                      f"{f' vs{p.virtual_stages}' if p.virtual_stages > 1 else ''}")
            out = {"gpu": recipe.target.gpu, "model overrides": _text(recipe.model.overrides),
                   "precision": recipe.precision.workbench_precision, "micro-batch": b.micro_batch,
                   "global batch": b.global_batch, "grad accumulation": b.grad_accumulation,
                   "activation checkpointing": recipe.activation_checkpointing.mode, "parallelism": layout}
            if recipe.lora is not None:
                out["LoRA"] = f"rank {recipe.lora.rank} on {', '.join(recipe.lora.targets)}"
            if self.stack != IDEAL:
                out.update({"stack": self.stack, "torch.compile": recipe.compile,
                            "parameter dtype": recipe.precision.param_dtype})
            if pred is not None:
                out.update({"step time (ms)": round(pred.step_time_s * 1e3, 2), "tokens/s": round(pred.tokens_per_s),
                            "samples/s": round(pred.samples_per_s, 2), "MFU": round(pred.mfu, 4),
                            "peak memory (GB)": round(pred.peak_memory_gb, 1), "fits": pred.fits})
            return out

        port, codesigned = cells(self.direct_port), cells(self.co_designed)
        return [{"setting": key, "direct_port": port.get(key), "co_designed": value}
                for key, value in codesigned.items()]

    def as_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.rows())

    def revisions_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([item.as_dict() for item in self.revisions])


def _text(overrides: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "none"


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def advise(
    model: str,
    source_gpu: str | GPU,
    target_gpu: str | GPU,
    gpus: int = 1,
    precision: str = "bf16",
    *,
    overrides: Mapping[str, int] | None = None,
    seq_len: int = 0,
    global_batch: int = 0,
    precisions: Sequence[str] | None = None,
    calibrated: bool = False,
    stack: str | None = None,
    param_dtype: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    virtual_stages: int | None = None,
    sharding: str | None = None,
    lora_rank: int = 0,
    lora_targets: Sequence[str] = DEFAULT_LORA_TARGETS,
) -> Advice:
    """Direct port vs co-designed recipe for ``model`` (a catalog name plus ``overrides``) on ``gpus`` target GPUs,
    both at one global batch: ``global_batch`` samples per step, or 0 for ``search.default_global_batch``.

    ``stack`` (a ``workbench.stacks`` name; None: the model's default, ``workbench.stacks.default_stack``) and
    ``param_dtype`` (None: the stack's
    default) price every recipe; ``tp``, ``pp``, ``cp``, ``ep``, ``virtual_stages`` and ``sharding`` are held on
    both sides when given, searched when None. ``lora_rank`` > 0: every side fine-tunes LoRA adapters of that rank
    on ``lora_targets`` (``TrainingConfig.lora_rank``), 0 trains all weights."""
    base_overrides = dict(overrides or {})
    base = revised_model(model, base_overrides)
    name = get_model(model).name
    source, target = get_gpu(source_gpu), get_gpu(target_gpu)
    seq_len = seq_len or default_seq_len(base)
    global_batch = global_batch or default_global_batch(base, gpus, seq_len)  # fixed once, for both sides
    named = None if stack is None else get_stack(stack).name  # an unknown name lists the stacks
    priced = named or default_stack(base)
    pricing = Pricing(None if priced == IDEAL else priced, param_dtype, calibrated)
    if param_dtype is not None:
        get_stack(priced).param_dtype(param_dtype)  # one the stack does not train with fails here
    split = {f: v for f, v in zip(SPLIT_FIELDS, (tp, pp, cp, ep, virtual_stages)) if v is not None}
    lora = {"lora_rank": lora_rank, "lora_targets": tuple(lora_targets)} if lora_rank else {}
    held = {k: v for k, v in (("stack", named), ("param_dtype", param_dtype), *split.items(), ("sharding", sharding),
                              *lora.items()) if v is not None}
    kwargs = dict(precision=precision, precisions=precisions, seq_len=seq_len, global_batch=global_batch, **lora)
    if sharding is not None:
        kwargs["shardings"] = (sharding,)
    notes: list[str] = []
    items: list[AdviceItem] = []
    target_eval = pricing.evaluator(base, target)

    source_layouts = held_layouts(base, source, gpus, split)
    source_result = search(base, source, gpus, evaluator=pricing.evaluator(base, source),
                           parallelisms=source_layouts, **kwargs)
    source_recipe = port = port_config = None
    if source_result.ranked:
        best = source_result.best
        port_config = best.config
        source_recipe = pricing.recipe(name, source, best, base_overrides)
        port = pricing.recipe(name, target, best, base_overrides)
        if not port.predicted.fits:
            usable = target.hbm_capacity_gb.value * (1 - HEADROOM_FRACTION)
            notes.append(f"the direct port does not fit the {target.display_name}: it needs "
                         f"{port.predicted.peak_memory_gb:.1f} GB of {usable:.1f} GB usable per GPU")
    elif source_layouts == []:
        notes.append(f"no layout of {gpus} x {source.display_name} holds {_split_text(split)} for {name}: no "
                     "direct port")
    else:
        notes.append(f"no configuration of {name} fits {gpus} x {source.display_name}"
                     f"{f' with {_split_text(held)}' if held else ''}: no direct port")

    target_layouts = held_layouts(base, target, gpus, split)
    if target_layouts == []:
        raise WorkbenchError(f"no layout of {gpus} x {target.display_name} holds {_split_text(split)} for {name} "
                             f"(tp inside the {int(target.scale_up_domain_gpus.value)}-GPU scale-up domain and "
                             "dividing the heads, dp x tp x pp x cp = the GPUs, ep dividing dp x cp)")
    first = search(base, target, gpus, evaluator=target_eval, parallelisms=target_layouts,
                   **kwargs).best  # raises when nothing fits the target

    # Structural revisions that keep the model's function, applied when the model predicts a gain.
    revised_overrides = dict(base_overrides)
    model_items = _padding_items(name, base, base_overrides, target, first, pricing)
    for item in model_items:
        if item.applied:
            revised_overrides[item.field] = int(item.new)  # type: ignore[arg-type]
    items += model_items
    final_model = revised_model(name, revised_overrides)
    final_eval = target_eval if final_model == base else pricing.evaluator(final_model, target)
    final = (search(final_model, target, gpus, evaluator=final_eval, parallelisms=target_layouts, **kwargs).best
             if final_model != base else first)
    revisions = [Revision(i.name, i.field, int(i.old), int(i.new), i.reason, i.predicted_gain)  # type: ignore[arg-type]
                 for i in model_items if i.applied]
    co_designed = pricing.recipe(name, target, final, revised_overrides, revisions)
    for recipe in (source_recipe, port, co_designed):
        if recipe is not None and recipe.batch.global_batch != global_batch:  # search holds it: a broken invariant
            raise WorkbenchError(f"advisor: a recipe has global batch {recipe.batch.global_batch}, not the "
                                 f"{global_batch} both sides must share")

    if port is not None:
        items = _chain_model_gains(items, name, base_overrides, port_config, best.compile,
                                   port.predicted.tokens_per_s, target, pricing)
        items += _recipe_steps(port_config, best.compile, final, final_eval, target)
    items += _proposals(name, final_model, revised_overrides, target, final, pricing)
    if family_of(base).embedding_tables(base):
        items += _placement(base, source, target, final, pricing)
    return Advice(name, source.name, target.name, gpus, precision, source_recipe, port, co_designed, tuple(items),
                  tuple(notes), stack=priced, held=held, configs=(port_config, final.config))


def _gain(model: Model, gpu: GPU, cfg: TrainingConfig, pricing: Pricing, reference: float,
          compile: bool = True) -> tuple[float, bool]:
    """(throughput gain over ``reference`` tokens/s, fits) of ``cfg`` on ``model``; NaN gain if invalid."""
    try:
        resolved = cfg.resolved(model)
    except SpecError:
        return math.nan, False
    c = pricing.evaluator(model, gpu).evaluate(resolved, compile=compile)
    return c.tokens_per_s / reference, c.fits


def _padding_items(name: str, base: Model, overrides: dict, gpu: GPU, best: Candidate,
                   pricing: Pricing) -> list[AdviceItem]:
    """Pad the widths zero rows/columns keep the function of (``Family.padding_fields``: a transformer's vocabulary
    and FFN width) to the multiple the model likes best."""
    items = []
    for field, why in family_of(base).padding_fields.items():
        old = getattr(base, field)
        tried = []
        for multiple in PAD_MULTIPLES:
            new = _round_up(old, multiple * best.config.parallelism.tp)
            if new == old or any(t[0] == new for t in tried):
                continue
            gain, fits = _gain(revised_model(name, {**overrides, field: new}), gpu, best.config, pricing,
                               best.tokens_per_s, best.compile)
            tried.append((new, multiple, gain, fits))
        good = [t for t in tried if t[3] and t[2] >= MIN_GAIN]
        if good:
            new, multiple, gain, _ = max(good, key=lambda t: t[2])
            items.append(AdviceItem("model", f"pad_{field.split('_')[0]}", field, old, new,
                                    f"pad to a multiple of {multiple} x tp: {why}", gain, True))
    return items


def _chain_model_gains(items: list[AdviceItem], name: str, overrides: dict, port: TrainingConfig, compile: bool,
                       port_tokens_per_s: float, gpu: GPU, pricing: Pricing) -> list[AdviceItem]:
    """Re-predict applied model revisions one after another at the direct-port config (``port``, run with
    ``compile``, predicted at ``port_tokens_per_s``), so that the gains of the whole chain (model revisions, then
    recipe steps) multiply to the co-designed / direct-port ratio."""
    current = dict(overrides)
    reference = port_tokens_per_s
    out = []
    for item in items:
        if item.kind != "model" or not item.applied:
            out.append(item)
            continue
        current[item.field] = int(item.new)  # type: ignore[arg-type]
        revised = revised_model(name, current)
        gain, _ = _gain(revised, gpu, port, pricing, reference, compile)
        if math.isnan(gain):
            out.append(item)
            continue
        out.append(replace(item, predicted_gain=gain, reason=f"{item.reason} (gain at the direct-port config)"))
        reference *= gain
    return out


def _recipe_steps(port: TrainingConfig, port_compile: bool, final: Candidate, ev: StepEvaluator,
                  gpu: GPU) -> list[AdviceItem]:
    """Walk from the direct port (``port``, run with ``port_compile``) to the co-designed candidate one setting
    group at a time, predicting each step (the compile flag last, where the stack follows it)."""
    target = replace(final.config, global_batch=final.config.samples_per_step)  # explicit, as recipes hold it
    current, compiled = port.resolved(ev.model), port_compile
    steps = [
        ("precision", "precision", lambda c: replace(c, precision=target.precision)),
        ("parallel layout", "parallelism", lambda c: replace(c, parallelism=target.parallelism)),
        ("activation checkpointing", "activation_checkpointing",
         lambda c: replace(c, activation_checkpointing=target.activation_checkpointing)),
        ("micro-batch", "micro_batch",
         lambda c: replace(c, micro_batch=target.micro_batch, global_batch=target.global_batch)),
    ]
    usable = gpu.hbm_capacity_gb.value * (1 - HEADROOM_FRACTION)
    before = ev.evaluate(current, compile=compiled)
    items, pending = [], []

    def record(after: Candidate) -> None:
        old = ", ".join(_describe(before, f) for _, f in pending)
        new = ", ".join(_describe(after, f) for _, f in pending)
        reason = (f"peak memory {before.peak_memory_gb:.1f} -> {after.peak_memory_gb:.1f} GB of {usable:.1f} GB usable"
                  f"{'' if after.fits else ' (this intermediate step alone does not fit)'}")
        items.append(AdviceItem("recipe", " + ".join(p[0] for p in pending), "+".join(p[1] for p in pending), old, new,
                                reason, after.tokens_per_s / before.tokens_per_s, True))

    for label, field, change in steps:
        nxt = change(current)
        if nxt == current:
            continue
        pending.append((label, field))
        try:
            nxt = nxt.resolved(ev.model)
        except SpecError:
            current = nxt  # invalid on its own (e.g. batch divisibility): merge into the next step
            continue
        after = ev.evaluate(nxt, compile=compiled)
        record(after)
        before, current, pending = after, nxt, []
    if final.compile != compiled and not pending:  # a stack that follows the flag: compiled on one side only
        pending.append(("torch.compile", "compile"))
        record(ev.evaluate(current, compile=final.compile))
    return items


def _describe(candidate: Candidate, field: str) -> str:
    cfg = candidate.config
    p = cfg.parallelism
    layout = (f"dp{p.dp} {p.sharding} tp{p.tp} pp{p.pp} ep{p.ep}{f' cp{p.cp}' if p.cp > 1 else ''}"
              f"{f' vs{p.virtual_stages}' if p.virtual_stages > 1 else ''}")
    return {"precision": cfg.precision, "activation_checkpointing": cfg.activation_checkpointing,
            "micro_batch": f"micro-batch {cfg.micro_batch} x accumulation {cfg.grad_accumulation}",
            "parallelism": layout, "compile": "compiled" if candidate.compile else "eager"}[field]


def _proposals(name: str, model: Model, overrides: dict, gpu: GPU, best: Candidate,
               pricing: Pricing) -> list[AdviceItem]:
    """Changes to the model's math, with predicted gains at the co-designed config: never applied. They edit a
    decoder's attention and widths, so only a transformer gets them."""
    if not isinstance(model, TransformerModel):
        return []
    inst = gpu.matrix_instruction_mnk.value.get("bf16", (16, 16, 16))
    options: list[tuple[str, str, dict, str]] = []
    for multiple in PAD_MULTIPLES:
        hidden = _round_up(model.hidden_size, multiple)
        if hidden != model.hidden_size:
            options.append(("pad_hidden", "hidden_size", {"hidden_size": hidden},
                            f"hidden size to a multiple of {multiple}: norms and residuals change width"))
    q = model.q_size
    for head_dim in (64, 128, 256):
        if head_dim != model.head_dim and q % head_dim == 0:
            heads = q // head_dim
            kv = max(1, model.num_kv_heads * model.head_dim // head_dim)
            if heads % kv == 0:
                options.append(("head_dim", "head_dim", {"head_dim": head_dim, "num_heads": heads, "num_kv_heads": kv},
                                f"head_dim {model.head_dim} -> {head_dim} ({heads} heads, {kv} KV heads) against the "
                                f"{gpu.display_name}'s {inst[0]}x{inst[1]}x{inst[2]} bf16 matrix instruction"))
    for kv in (model.num_kv_heads // 2, model.num_kv_heads * 2):
        if 1 <= kv <= model.num_heads and model.num_heads % kv == 0 and kv != model.num_kv_heads:
            options.append(("gqa_groups", "num_kv_heads", {"num_kv_heads": kv},
                            f"{kv} KV heads ({model.num_heads // kv} query heads per group): attention and KV bytes"))
    items = []
    for label, field, change, reason in options:
        try:
            candidate_model = revised_model(name, {**overrides, **change})
        except SpecError:
            continue
        gain, fits = _gain(candidate_model, gpu, best.config, pricing, best.tokens_per_s, best.compile)
        if math.isnan(gain):
            continue
        verdict = ("" if gain_verdict(gain) == "gain" else
                   f"; {gain_verdict(gain)} (inside the model's +/-{GAIN_UNCERTAINTY:.0%}): keep the current value")
        items.append(AdviceItem("proposal", label, field, getattr(model, field), change[field],
                                f"{reason}{'' if fits else '; does not fit at the co-designed config'}{verdict}", gain,
                                False, requires_retraining=True))
    best_per_label: dict[str, AdviceItem] = {}
    for item in items:  # one proposal per kind: the one the model likes best
        if item.name not in best_per_label or item.predicted_gain > best_per_label[item.name].predicted_gain:
            best_per_label[item.name] = item
    return list(best_per_label.values())


def _placement(model: Model, source: GPU, target: GPU, final: Candidate, pricing: Pricing) -> list[AdviceItem]:
    """Embedding tables (recommendation models): how many GPUs' HBM they need on each GPU type, and what
    holding them on fewer target GPUs is predicted to give per GPU."""
    table_bytes = model.embedding_params * 4  # fp32 rows, as workbench.memory holds them
    cfg = final.config

    def fewest(gpu: GPU) -> int:
        for dp in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            trial = TrainingConfig(1, cfg.seq_len, cfg.precision, Parallelism(dp=dp, sharding="ddp"))
            if pricing.evaluator(model, gpu).evaluate(trial.resolved(model)).fits:
                return dp
        return 0

    need_source, need_target = fewest(source), fewest(target)
    gain = 1.0
    batch = cfg.samples_per_step  # both GPU counts train at the co-designed recipe's global batch
    if (need_source and need_target and need_target < need_source
            and batch % need_target == 0 and batch % need_source == 0):
        ev = pricing.evaluator(model, target)
        per_gpu = []
        for dp in (need_target, need_source):
            best = search(model, target, dp, precision=cfg.precision, global_batch=batch, evaluator=ev).best
            per_gpu.append(best.samples_per_s / dp)
        gain = per_gpu[0] / per_gpu[1]
    placement = "hbm" if cfg.parallelism.dp == 1 else "row_sharded"
    return [AdviceItem("placement", "embedding_placement", "embeddings", f"{need_source or 'no'} x {source.name}",
                       f"{need_target or 'no'} x {target.name}",
                       f"tables {table_bytes / GB:.1f} GB fp32 (+ row-wise optimizer state) fit whole in the HBM of "
                       f"{need_source or 'no'} {source.display_name} vs {need_target or 'no'} {target.display_name} "
                       f"GPUs; co-designed placement: {placement}; gain = target samples/s per GPU at the fewest "
                       f"GPUs vs at the source's, both at global batch {batch}", gain, True)]
