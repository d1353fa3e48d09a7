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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from workbench.config import Parallelism, TrainingConfig, default_seq_len
from workbench.errors import SpecError, WorkbenchError
from workbench.hardware import GPU, get_gpu
from workbench.memory import GB, HEADROOM_FRACTION
from workbench.models import Model, TransformerModel, get_model
from workbench.recipe.build import make_recipe, revised_model
from workbench.recipe.schema import Recipe, Revision
from workbench.recipe.search import STEP_TIME_UNCERTAINTY, Candidate, StepEvaluator, default_global_batch, search

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
                "precision": self.precision, "gain": self.gain, "gain_uncertainty": self.gain_uncertainty,
                "gain_verdict": self.gain_verdict, "gain_text": self.gain_text, "notes": list(self.notes),
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
            out = {"gpu": recipe.target.gpu, "model overrides": _text(recipe.model.overrides),
                   "precision": recipe.precision.workbench_precision, "micro-batch": b.micro_batch,
                   "global batch": b.global_batch, "grad accumulation": b.grad_accumulation,
                   "activation checkpointing": recipe.activation_checkpointing.mode,
                   "parallelism": f"dp{p.dp} ({p.sharding}) tp{p.tp} pp{p.pp} ep{p.ep}"}
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
) -> Advice:
    """Direct port vs co-designed recipe for ``model`` (a catalog name plus ``overrides``) on ``gpus`` target GPUs,
    both at one global batch: ``global_batch`` samples per step, or 0 for ``search.default_global_batch``."""
    base_overrides = dict(overrides or {})
    base = revised_model(model, base_overrides)
    name = get_model(model).name
    source, target = get_gpu(source_gpu), get_gpu(target_gpu)
    seq_len = seq_len or default_seq_len(base)
    global_batch = global_batch or default_global_batch(base, gpus, seq_len)  # fixed once, for both sides
    kwargs = dict(precision=precision, precisions=precisions, seq_len=seq_len, global_batch=global_batch)
    notes: list[str] = []
    items: list[AdviceItem] = []
    target_eval = StepEvaluator(base, target, calibrated=calibrated)

    source_result = search(base, source, gpus, calibrated=calibrated, **kwargs)
    source_recipe = port = None
    if source_result.ranked:
        best = source_result.best
        source_recipe = make_recipe(name, source, best.config, overrides=base_overrides, calibrated=calibrated)
        port = make_recipe(name, target, best.config, overrides=base_overrides, calibrated=calibrated)
        if not port.predicted.fits:
            usable = target.hbm_capacity_gb.value * (1 - HEADROOM_FRACTION)
            notes.append(f"the direct port does not fit the {target.display_name}: it needs "
                         f"{port.predicted.peak_memory_gb:.1f} GB of {usable:.1f} GB usable per GPU")
    else:
        notes.append(f"no configuration of {name} fits {gpus} x {source.display_name}: no direct port")

    first = search(base, target, gpus, evaluator=target_eval, **kwargs).best  # raises when nothing fits the target

    # Structural revisions that keep the model's function, applied when the model predicts a gain.
    revised_overrides = dict(base_overrides)
    model_items = _padding_items(name, base, base_overrides, target, first, calibrated)
    for item in model_items:
        if item.applied:
            revised_overrides[item.field] = int(item.new)  # type: ignore[arg-type]
    items += model_items
    final_model = revised_model(name, revised_overrides)
    final_eval = target_eval if final_model == base else StepEvaluator(final_model, target, calibrated=calibrated)
    final = search(final_model, target, gpus, evaluator=final_eval, **kwargs).best if final_model != base else first
    revisions = [Revision(i.name, i.field, int(i.old), int(i.new), i.reason, i.predicted_gain)  # type: ignore[arg-type]
                 for i in model_items if i.applied]
    co_designed = make_recipe(name, target, final.config, overrides=revised_overrides, revisions=revisions,
                              calibrated=calibrated)
    for recipe in (source_recipe, port, co_designed):
        if recipe is not None and recipe.batch.global_batch != global_batch:  # search holds it: a broken invariant
            raise WorkbenchError(f"advisor: a recipe has global batch {recipe.batch.global_batch}, not the "
                                 f"{global_batch} both sides must share")

    if port is not None:
        items = _chain_model_gains(items, name, base_overrides, port, target, calibrated)
        items += _recipe_steps(port, final.config, final_eval, target)
    items += _proposals(name, final_model, revised_overrides, target, final, calibrated)
    if not isinstance(base, TransformerModel):
        items += _placement(base, source, target, final, calibrated)
    return Advice(name, source.name, target.name, gpus, precision, source_recipe, port, co_designed, tuple(items),
                  tuple(notes))


def _gain(model: Model, gpu: GPU, cfg: TrainingConfig, calibrated: bool, reference: float) -> tuple[float, bool]:
    """(throughput gain over ``reference`` tokens/s, fits) of ``cfg`` on ``model``; NaN gain if invalid."""
    try:
        resolved = cfg.resolved(model)
    except SpecError:
        return math.nan, False
    c = StepEvaluator(model, gpu, calibrated=calibrated).evaluate(resolved)
    return c.tokens_per_s / reference, c.fits


def _padding_items(name: str, base: Model, overrides: dict, gpu: GPU, best: Candidate,
                   calibrated: bool) -> list[AdviceItem]:
    """Pad vocabulary and FFN width (zero rows/columns keep the function) to the multiple the model likes best."""
    if not isinstance(base, TransformerModel):
        return []
    items = []
    for field, why in (("vocab_size", "LM-head GEMM n and embedding rows; mask the padded logits"),
                       ("ffn_hidden_size", "FFN GEMM n/k; zero-initialised padding stays zero under training")):
        old = getattr(base, field)
        tried = []
        for multiple in PAD_MULTIPLES:
            new = _round_up(old, multiple * best.config.parallelism.tp)
            if new == old or any(t[0] == new for t in tried):
                continue
            gain, fits = _gain(revised_model(name, {**overrides, field: new}), gpu, best.config, calibrated,
                               best.tokens_per_s)
            tried.append((new, multiple, gain, fits))
        good = [t for t in tried if t[3] and t[2] >= MIN_GAIN]
        if good:
            new, multiple, gain, _ = max(good, key=lambda t: t[2])
            items.append(AdviceItem("model", f"pad_{field.split('_')[0]}", field, old, new,
                                    f"pad to a multiple of {multiple} x tp: {why}", gain, True))
    return items


def _chain_model_gains(items: list[AdviceItem], name: str, overrides: dict, port: Recipe, gpu: GPU,
                       calibrated: bool) -> list[AdviceItem]:
    """Re-predict applied model revisions one after another at the direct-port config, so that the gains of the
    whole chain (model revisions, then recipe steps) multiply to the co-designed / direct-port ratio."""
    from workbench.recipe.build import training_config

    cfg = training_config(port)
    current = dict(overrides)
    reference = port.predicted.tokens_per_s if port.predicted else math.nan
    out = []
    for item in items:
        if item.kind != "model" or not item.applied:
            out.append(item)
            continue
        current[item.field] = int(item.new)  # type: ignore[arg-type]
        revised = revised_model(name, current)
        gain, _ = _gain(revised, gpu, cfg, calibrated, reference)
        if math.isnan(gain):
            out.append(item)
            continue
        out.append(replace(item, predicted_gain=gain, reason=f"{item.reason} (gain at the direct-port config)"))
        reference *= gain
    return out


def _recipe_steps(port: Recipe, final: TrainingConfig, ev: StepEvaluator, gpu: GPU) -> list[AdviceItem]:
    """Walk from the direct port to the co-designed config one setting group at a time, predicting each step."""
    from workbench.recipe.build import training_config

    final = replace(final, global_batch=final.samples_per_step)  # explicit, as recipes hold it
    current = training_config(port).resolved(ev.model)
    steps = [
        ("precision", "precision", lambda c: replace(c, precision=final.precision)),
        ("parallel layout", "parallelism", lambda c: replace(c, parallelism=final.parallelism)),
        ("activation checkpointing", "activation_checkpointing",
         lambda c: replace(c, activation_checkpointing=final.activation_checkpointing)),
        ("micro-batch", "micro_batch",
         lambda c: replace(c, micro_batch=final.micro_batch, global_batch=final.global_batch)),
    ]
    usable = gpu.hbm_capacity_gb.value * (1 - HEADROOM_FRACTION)
    before = ev.evaluate(current)
    items, pending = [], []
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
        after = ev.evaluate(nxt)
        old = ", ".join(_describe(before.config, f) for _, f in pending)
        new = ", ".join(_describe(after.config, f) for _, f in pending)
        reason = (f"peak memory {before.peak_memory_gb:.1f} -> {after.peak_memory_gb:.1f} GB of {usable:.1f} GB usable"
                  f"{'' if after.fits else ' (this intermediate step alone does not fit)'}")
        items.append(AdviceItem("recipe", " + ".join(p[0] for p in pending), "+".join(p[1] for p in pending), old, new,
                                reason, after.tokens_per_s / before.tokens_per_s, True))
        before, current, pending = after, nxt, []
    return items


def _describe(cfg: TrainingConfig, field: str) -> str:
    p = cfg.parallelism
    return {"precision": cfg.precision, "activation_checkpointing": cfg.activation_checkpointing,
            "micro_batch": f"micro-batch {cfg.micro_batch} x accumulation {cfg.grad_accumulation}",
            "parallelism": f"dp{p.dp} {p.sharding} tp{p.tp} pp{p.pp} ep{p.ep}"}[field]


def _proposals(name: str, model: Model, overrides: dict, gpu: GPU, best: Candidate,
               calibrated: bool) -> list[AdviceItem]:
    """Changes to the model's math, with predicted gains at the co-designed config: never applied."""
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
        gain, fits = _gain(candidate_model, gpu, best.config, calibrated, best.tokens_per_s)
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


def _placement(model: Model, source: GPU, target: GPU, final: Candidate, calibrated: bool) -> list[AdviceItem]:
    """Embedding tables (recommendation models): how many GPUs' HBM they need on each GPU type, and what
    holding them on fewer target GPUs is predicted to give per GPU."""
    table_bytes = model.embedding_params * 4  # fp32 rows, as workbench.memory holds them
    cfg = final.config

    def fewest(gpu: GPU) -> int:
        for dp in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            trial = TrainingConfig(1, cfg.seq_len, cfg.precision, Parallelism(dp=dp, sharding="ddp"))
            if StepEvaluator(model, gpu, calibrated=calibrated).evaluate(trial.resolved(model)).fits:
                return dp
        return 0

    need_source, need_target = fewest(source), fewest(target)
    gain = 1.0
    batch = cfg.samples_per_step  # both GPU counts train at the co-designed recipe's global batch
    if (need_source and need_target and need_target < need_source
            and batch % need_target == 0 and batch % need_source == 0):
        ev = StepEvaluator(model, target, calibrated=calibrated)
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
