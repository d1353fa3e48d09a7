"""Analysis of ``benchmarks/train/fp8_convergence.py``: the verdict of ``results/h200/train/fp8_convergence/PLAN.md``,
as pure functions of held-out curves, and the plan's runs (no torch; ``workbench.train.convergence_report`` writes
them out).

A curve is a run's ``heldout_losses``: [(optimizer steps done, held-out loss), ...], from step 0. Per seed s each
fp8 run is paired with the bf16 run of its seed:

- Q, final quality: the mean held-out loss of the evaluations in the last 50 of 300 steps (250..300; another
  ``--steps`` scales the window: its last sixth); r_s = Q_fp8,s / Q_bf16,s - 1.
- T, time to quality: bf16's drop runs from its step-0 held-out loss L0 to Q_bf16,s; at p = 50% and 90% of it the
  level is L0 - p (L0 - Q_bf16,s); a run's steps to a level are its curve's first crossing, linearly interpolated
  between the evaluations around it; lag_s = steps_fp8 / steps_bf16 - 1, infinite when fp8 never gets there.
- Over the seeds, for r, lag at 50% and lag at 90%: the mean m and the 95% half-width h = t(0.975, N-1) sd / sqrt(N)
  (paired, Student's t); tolerances |r| 3%, |lag| 10%; agree when every interval [m - h, m + h] lies inside its
  tolerance, disagree when one lies entirely outside it (|m| - h > tolerance), inconclusive otherwise.

Cases the PLAN does not spell out, decided here: with infinite lags the mean is infinite and the sample sd is not
defined, so the interval is taken as the limit of huge finite lags (k of N seeds never reaching, all growing
together): its upper end is +inf and its lower end +inf when k > t sqrt(k (N - k) / (N - 1)) (N = 8: k >= 4;
entirely outside: disagree), else -inf (it spans the tolerance: not agree, and inconclusive unless another
quantity disagrees). A NaN (a diverged curve, or a bf16 run that did not learn) leaves its interval undecided:
inconclusive unless another quantity disagrees. A verdict needs every planned seed's pair complete; otherwise
the recipe is "incomplete" and the numbers over the complete seeds are still shown.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from workbench.train.schedule import CONSTANT_LR, LrSchedule

Curve = list[tuple[int, float]]

PLAN_SEEDS: tuple[int, ...] = tuple(range(100, 108))
"""The PLAN's seeds, 100 to 107: a verdict needs every one of them."""
PLAN_STEPS = 300
PLAN_EVAL_EVERY = 10
PLAN_EVAL_WINDOWS = 32
PLAN_LR = 6e-4
REFERENCE = "bf16"
FP8_RECIPES: tuple[str, ...] = ("rowwise_with_gw_hp", "rowwise")
"""The fp8 recipes the PLAN judges, in the report's order."""
RERUN_SEED = 100
"""bf16 at this seed runs twice: the determinism check (not part of the verdict)."""
Q_TOLERANCE = 0.03
"""|r| tolerance: the session-2 policy's 3% (PLAN)."""
LAG_TOLERANCE = 0.10
"""|lag| tolerance: 10% more (or fewer) steps, a decision (PLAN)."""
LEVELS: tuple[float, ...] = (0.5, 0.9)
"""Fractions of bf16's held-out drop at which steps are compared (PLAN)."""
Q_WINDOW_STEPS, Q_WINDOW_OF = 50, 300
"""Q averages the evaluations in the last 50 of 300 steps; another run length scales it."""
QUANTITIES: dict[str, float] = {"r": Q_TOLERANCE, "lag50": LAG_TOLERANCE, "lag90": LAG_TOLERANCE}
"""The verdict's three paired quantities and their tolerances."""

T_975: tuple[float, ...] = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                            2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                            2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""Student's t 0.975 quantiles for 1..30 degrees of freedom, from NIST/SEMATECH e-Handbook of Statistical Methods,
1.3.6.7.2 "Critical values of the Student's t distribution" (alpha = 0.025 column); checked to 3 decimals
against the regularised incomplete beta function (mpmath). df 7 gives the PLAN's 2.365."""


def t_quantile_975(df: int) -> float:
    """Student's t(0.975, df) for df in 1..30 (``T_975``)."""
    if not isinstance(df, int) or not 1 <= df <= len(T_975):
        raise ValueError(f"t quantile for {df!r} degrees of freedom: expected 1 to {len(T_975)} (the table holds "
                         "those; more seeds need a longer table)")
    return T_975[df - 1]


def t_quantile(df: int, confidence: float = 0.95) -> float:
    """The two-sided ``confidence`` quantile of Student's t, t((1 + confidence) / 2, df): the table for 95%
    (``t_quantile_975``), else solved from the t CDF, F(t) = 1 - I_{df / (df + t^2)}(df / 2, 1 / 2) / 2 for t > 0
    (the regularised incomplete beta function of mpmath, a torch dependency)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence!r}: expected a probability in (0, 1), e.g. 0.95")
    if confidence == 0.95:
        return t_quantile_975(df)
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"t quantile for {df!r} degrees of freedom: expected a positive integer")
    import mpmath

    p = (1 + confidence) / 2
    return float(mpmath.findroot(lambda t: 1 - mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True) / 2
                                 - p, 2.0))


@dataclass(frozen=True)
class Stage:
    """One stage of the check: the seeds it runs, the seeds its verdict needs, its intervals' confidence, its rule."""

    seeds: tuple[int, ...]
    planned_seeds: tuple[int, ...]
    confidence: float
    plan: str
    """The rule's file, beside the results (``results/h200/train/fp8_convergence/``)."""
    lr_schedule: LrSchedule = CONSTANT_LR
    """The job's ``--lr-schedule``, ``--lr-warmup-steps``, ``--lr-min-ratio`` (default: constant)."""


STAGES: dict[int, Stage] = {
    1: Stage(PLAN_SEEDS, PLAN_SEEDS, 0.95, "PLAN.md"),
    2: Stage(tuple(range(108, 124)), tuple(range(100, 124)), 0.975, "PLAN_STAGE2.md"),
    3: Stage(tuple(range(200, 224)), tuple(range(200, 224)), 0.975, "PLAN_SCHEDULE.md", LrSchedule("cosine", 30, 0.1)),
}
"""Stage 1: PLAN.md's 8 seeds at 95%. Stage 2 (PLAN_STAGE2.md, stated after stage 1 was inconclusive): 16 more
seeds, the verdict over all 24 at 97.5% (two looks at the data, half of the 5% each: Bonferroni); the last stage.
Stage 3 (PLAN_SCHEDULE.md): a separate check of the same question with a cosine schedule (30 warm-up steps, decay to
10%), 24 fresh seeds, 97.5%, one look."""


def run_name(recipe: str, seed: int, rerun: bool = False) -> str:
    """``bf16-seed100``, ``rowwise-seed103``, ``bf16-seed100-rerun``."""
    return f"{recipe}-seed{seed}" + ("-rerun" if rerun else "")


def parse_run_name(name: str) -> tuple[str, int, bool] | None:
    """(recipe, seed, rerun) of a ``run_name``; None for another name."""
    rerun = name.endswith("-rerun")
    base = name[:-len("-rerun")] if rerun else name
    recipe, sep, seed = base.rpartition("-seed")
    return (recipe, int(seed), rerun) if sep and recipe and seed.isdigit() else None


# ------------------------------------------------------------------------------------------------ one curve
def quality_window_start(total_steps: int) -> int:
    """First step of Q's window: 250 of 300 (the last 50 steps), the last sixth of another run length."""
    return total_steps - round(total_steps * Q_WINDOW_STEPS / Q_WINDOW_OF)


def final_quality(curve: Curve, total_steps: int) -> float:
    """Q: the mean held-out loss of the evaluations at steps ``quality_window_start`` .. ``total_steps``."""
    first = quality_window_start(total_steps)
    window = [loss for step, loss in curve if first <= step <= total_steps]
    if not window:
        raise ValueError(f"no evaluation between steps {first} and {total_steps} in a curve of steps "
                         f"{[s for s, _ in curve]}")
    return statistics.fmean(window)


def target_level(l0: float, q_ref: float, fraction: float) -> float:
    """The loss at ``fraction`` of the reference's drop from L0 to its Q: L0 - p (L0 - Q)."""
    return l0 - fraction * (l0 - q_ref)


def first_crossing(curve: Curve, level: float) -> float | None:
    """Steps to ``level``: the first evaluation at or below it, linearly interpolated from the evaluation before
    (the first evaluation's own step when it is already there); None if the curve never gets there."""
    for i, (step, loss) in enumerate(curve):
        if loss <= level:
            if i == 0:
                return float(step)
            prev_step, prev_loss = curve[i - 1]
            return prev_step + (prev_loss - level) / (prev_loss - loss) * (step - prev_step)
    return None


def lag(steps: float | None, reference_steps: float | None) -> float:
    """steps / reference_steps - 1: > 0 where the run needs more steps; +inf if it never gets there; NaN when the
    reference has no positive steps to the level (it never got there, or was there at step 0)."""
    if reference_steps is None or reference_steps <= 0:
        return math.nan
    return math.inf if steps is None else steps / reference_steps - 1


# ------------------------------------------------------------------------------------------------ intervals
@dataclass(frozen=True)
class Interval:
    """A paired quantity over N seeds: mean m, 95% half-width h and the interval [low, high]."""

    mean: float
    half_width: float
    low: float
    high: float
    n: int
    infinite: int = 0
    """Seeds whose value is +inf (a level never reached)."""


def paired_interval(values: list[float], confidence: float = 0.95) -> Interval:
    """m and h = t((1 + confidence) / 2, N-1) sd / sqrt(N) over ``values`` (one per seed, N >= 2; N = 1 gives h = NaN). +inf
    values: the limit of huge finite ones (the module docstring): m = +inf, h = +inf, high = +inf and low = +inf
    when the k infinite values outweigh the spread, k > t sqrt(k (N - k) / (N - 1)), else -inf."""
    n = len(values)
    if n == 0:
        raise ValueError("paired_interval of no values: expected one value per seed")
    if n == 1:
        return Interval(values[0], math.nan, math.nan, math.nan, 1, int(values[0] == math.inf))
    t = t_quantile(n - 1, confidence)
    k = sum(v == math.inf for v in values)
    if k:
        low = math.inf if k > t * math.sqrt(k * (n - k) / (n - 1)) else -math.inf
        return Interval(math.inf, math.inf, low, math.inf, n, k)
    m = statistics.fmean(values)
    h = t * statistics.stdev(values) / math.sqrt(n) if not any(map(math.isnan, values)) else math.nan
    return Interval(m, h, m - h, m + h, n)


def interval_class(interval: Interval, tolerance: float) -> str:
    """inside ([low, high] within [-tolerance, tolerance]), outside (entirely beyond it on one side: |m| - h >
    tolerance) or straddles (anything else, NaN included)."""
    if -tolerance <= interval.low and interval.high <= tolerance:
        return "inside"
    if interval.low > tolerance or interval.high < -tolerance:
        return "outside"
    return "straddles"


def verdict(classes: list[str]) -> str:
    """agree when every interval is inside its tolerance, disagree when one is outside, inconclusive otherwise."""
    if any(c == "outside" for c in classes):
        return "disagree"
    return "agree" if classes and all(c == "inside" for c in classes) else "inconclusive"


# ------------------------------------------------------------------------------------------------ per seed, per recipe
def pair_quantities(reference: Curve, curve: Curve, total_steps: int) -> dict:
    """One seed: Q of both runs, r, and per level (``LEVELS``) the level, both runs' steps to it and the lag."""
    q_ref, q = final_quality(reference, total_steps), final_quality(curve, total_steps)
    out = {"q_bf16": q_ref, "q": q, "r": q / q_ref - 1, "l0_bf16": reference[0][1], "l0": curve[0][1]}
    for p in LEVELS:
        key = f"{round(p * 100)}"
        level = target_level(reference[0][1], q_ref, p)
        steps_ref, steps = first_crossing(reference, level), first_crossing(curve, level)
        out.update({f"level{key}": level, f"steps{key}_bf16": steps_ref, f"steps{key}": steps,
                    f"lag{key}": lag(steps, steps_ref)})
    return out


def judge_recipe(reference: dict[int, Curve], curves: dict[int, Curve], total_steps: int,
                 planned_seeds: tuple[int, ...] = PLAN_SEEDS, confidence: float = 0.95) -> dict:
    """One fp8 recipe against bf16: ``reference`` and ``curves`` hold the complete curves by seed. The paired
    quantities per seed present in both, the intervals over them -- over the planned seeds present, or over every
    seed present when none is planned (smoke runs) -- and the status: the verdict when every planned seed is
    there, else incomplete."""
    present = sorted(set(reference) & set(curves))
    seeds = [s for s in present if s in planned_seeds] or present
    per_seed = {s: pair_quantities(reference[s], curves[s], total_steps) for s in seeds}
    missing = [s for s in planned_seeds if s not in per_seed]
    intervals, classes = {}, {}
    for name, tolerance in QUANTITIES.items():
        if per_seed:
            intervals[name] = paired_interval([per_seed[s][name] for s in seeds], confidence)
            classes[name] = interval_class(intervals[name], tolerance)
    decided = verdict(list(classes.values())) if len(classes) == len(QUANTITIES) else "n/a"
    return {"status": "incomplete" if missing else decided, "verdict_over_present_seeds": decided,
            "seeds": seeds, "missing_seeds": missing, "per_seed": per_seed, "intervals": intervals,
            "classes": classes}


def expected_steps(total_steps: int, every: int) -> list[int]:
    """Evaluation steps of a complete curve (``workbench.train.job.evaluation_steps``, repeated here so the analysis
    needs no torch)."""
    return sorted({*range(0, total_steps + 1, every), total_steps})


def curve_of(metrics: dict) -> tuple[Curve, int] | None:
    """(curve, total steps) of a metrics JSON whose held-out curve is complete, else None."""
    settings, heldout = metrics.get("settings", {}), metrics.get("heldout_losses") or []
    total = metrics.get("steps", 0) + metrics.get("warmup", 0)
    every = settings.get("eval_every")
    curve = [(int(step), float(loss)) for step, loss in heldout]
    if not every or not total or [s for s, _ in curve] != expected_steps(total, every):
        return None
    return curve, total


def bf16_spread(reference: dict[int, Curve], total_steps: int) -> dict:
    """bf16 seed to seed, for reference: mean, sd, min and max over seeds of Q and of the steps to its own 50% and
    90% levels (each seed's levels from its own L0 and Q)."""
    rows = {"q": [], "steps50": [], "steps90": []}
    for curve in reference.values():
        q = final_quality(curve, total_steps)
        rows["q"].append(q)
        for p in LEVELS:
            steps = first_crossing(curve, target_level(curve[0][1], q, p))
            rows[f"steps{round(p * 100)}"].append(math.nan if steps is None else steps)

    def stats(values: list[float]) -> dict:
        if not values:
            return {}
        sd = statistics.stdev(values) if len(values) > 1 else math.nan
        return {"mean": statistics.fmean(values), "sd": sd, "min": min(values), "max": max(values), "n": len(values)}

    return {key: stats(values) for key, values in rows.items()}


def determinism_check(first: dict | None, second: dict | None) -> dict:
    """The two bf16 runs of one seed: identical training and held-out curves, or the largest absolute differences."""
    if first is None or second is None:
        return {"status": "missing"}
    out = {}
    for key in ("losses", "heldout_losses"):
        a, b = first.get(key) or [], second.get(key) or []
        if key == "heldout_losses":
            a, b = [loss for _, loss in a], [loss for _, loss in b]
        out[key] = {"identical": a == b, "length": [len(a), len(b)],
                    "max_abs_difference": max((abs(x - y) for x, y in zip(a, b)), default=None)}
    out["status"] = "identical" if all(out[k]["identical"] for k in ("losses", "heldout_losses")) else "different"
    return out


def mean_curves(curves: dict[str, dict[int, Curve]], total_steps: int, every: int) -> dict[str, dict[int, float]]:
    """Seed-mean held-out loss per recipe at steps 0, 50, ..., 300 (the stride is a sixth of the run, rounded to
    the evaluation interval)."""
    stride = max(every, (total_steps // 6) // every * every)
    wanted = [s for s in expected_steps(total_steps, every) if s % stride == 0 or s == total_steps]
    out = {}
    for recipe, by_seed in curves.items():
        if by_seed:
            out[recipe] = {s: statistics.fmean(dict(c)[s] for c in by_seed.values()) for s in wanted}
    return out


def schedule_of(settings: dict) -> LrSchedule:
    """A metrics JSON's learning-rate schedule; constant when it records none (runs from before schedules existed)."""
    return LrSchedule(**settings["lr_schedule"]) if settings.get("lr_schedule") else CONSTANT_LR


def plan_deviations(metrics: list[dict], lr_schedule: LrSchedule = CONSTANT_LR) -> list[str]:
    """How the runs' settings differ from the PLAN's (steps, warm-up, lr and its schedule, evaluation, determinism,
    batch, model)."""
    planned = {"steps + warmup": PLAN_STEPS, "warmup": 0, "lr": PLAN_LR, "lr_schedule": lr_schedule,
               "eval_every": PLAN_EVAL_EVERY, "eval_windows": PLAN_EVAL_WINDOWS, "deterministic": True,
               "micro_batch": 8, "seq_len": 1024, "hidden_size": 1024, "compile": False}
    seen: dict[str, set] = {key: set() for key in planned}
    for m in metrics:
        s = m.get("settings", {})
        values = {"steps + warmup": m.get("steps", 0) + m.get("warmup", 0), "warmup": m.get("warmup"),
                  "lr": s.get("lr"), "lr_schedule": schedule_of(s), "eval_every": s.get("eval_every"), "eval_windows": s.get("eval_windows"),
                  "deterministic": s.get("deterministic"), "micro_batch": s.get("micro_batch"),
                  "seq_len": s.get("seq_len"), "hidden_size": (m.get("overrides") or {}).get("hidden_size"),
                  "compile": s.get("compile")}
        for key, value in values.items():
            seen[key].add(value)
    return [f"{key}: {sorted(map(str, values))} (PLAN: {planned[key]})" for key, values in seen.items()
            if values and values != {planned[key]}]


def analyze(metrics: dict[str, dict], planned_seeds: tuple[int, ...] = PLAN_SEEDS,
            recipes: tuple[str, ...] = FP8_RECIPES, confidence: float = 0.95,
            lr_schedule: LrSchedule = CONSTANT_LR) -> dict:
    """The whole analysis from the runs' metrics JSONs by run name (``run_name``)."""
    complete: dict[str, dict[int, Curve]] = {}
    totals, everies = set(), set()
    for name, m in metrics.items():
        parsed, got = parse_run_name(name), curve_of(m)
        if parsed and not parsed[2] and got:
            complete.setdefault(parsed[0], {})[parsed[1]] = got[0]
            totals.add(got[1])
            everies.add(m["settings"]["eval_every"])
    if len(totals) > 1 or len(everies) > 1:
        raise ValueError(f"runs of different lengths {sorted(totals)} or evaluation intervals {sorted(everies)}: "
                         "expected one setting for every run")
    total, every = (totals.pop(), everies.pop()) if totals else (PLAN_STEPS, PLAN_EVAL_EVERY)
    reference = complete.get(REFERENCE, {})
    judged = {r: judge_recipe(reference, complete.get(r, {}), total, planned_seeds, confidence) for r in recipes}
    deviations = plan_deviations(list(metrics.values()), lr_schedule)
    return {"total_steps": total, "eval_every": every, "planned_seeds": list(planned_seeds), "confidence": confidence,
            "q_window": [quality_window_start(total), total], "recipes": judged,
            "complete_seeds": {r: sorted(c) for r, c in complete.items()},
            "bf16_spread": bf16_spread(reference, total),
            "determinism": {name: determinism_check(metrics.get(name.removesuffix("-rerun")), m)
                            for name, m in metrics.items() if (parse_run_name(name) or ("", 0, False))[2]},
            "mean_curves": mean_curves({r: complete.get(r, {}) for r in (REFERENCE, *recipes)}, total, every),
            "plan_deviations": deviations, "plan_conformant": not deviations}


# ------------------------------------------------------------------------------------------------ the plan's runs
RECIPES: tuple[str, ...] = (REFERENCE, *FP8_RECIPES)
"""The order of one seed's runs."""


@dataclass(frozen=True)
class Run:
    recipe: str
    seed: int
    rerun: bool = False

    @property
    def name(self) -> str:
        return run_name(self.recipe, self.seed, self.rerun)


def plan_runs(seeds: tuple[int, ...], recipes: tuple[str, ...], rerun: bool = True) -> list[Run]:
    """Seed by seed, each seed's recipes in ``RECIPES`` order, then (``rerun``) the bf16 rerun (at ``RERUN_SEED``, or
    the first seed when that is not among ``seeds``) when bf16 runs at all."""
    runs = [Run(r, s) for s in seeds for r in RECIPES if r in recipes]
    if rerun and REFERENCE in recipes:
        runs.append(Run(REFERENCE, RERUN_SEED if RERUN_SEED in seeds else seeds[0], rerun=True))
    return runs
