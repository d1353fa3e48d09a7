"""Two processes under torchrun on gloo: FSDP2 over dp=2, tensor parallelism tp=2, DDP with accumulation; each with
held-out evaluation and deterministic mode."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import Parallelism, TrainingConfig

REPO = Path(__file__).resolve().parents[2]


def torchrun(recipe: Path, metrics: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="0", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "workbench.train", "--recipe", str(recipe), "--metrics", str(metrics), "--quiet", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("layout, accumulation", [(Parallelism(dp=2), 1), (Parallelism(tp=2), 1),
                                                  (Parallelism(dp=2, sharding="ddp"), 2)],
                         ids=["fsdp-dp2", "tp2", "ddp-dp2-accumulate2"])
def test_two_ranks(tiny_recipe, tmp_path, layout, accumulation):
    config = TrainingConfig(2, 64, parallelism=layout, global_batch=2 * layout.dp * accumulation)
    metrics = tmp_path / "metrics.json"
    proc = torchrun(tiny_recipe("two", config), metrics, "--steps", "12", "--warmup", "1", "--lr", "3e-3",
                    "--eval-every", "5", "--eval-windows", "3", "--deterministic")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(metrics.read_text())
    assert m["world_size"] == 2 and m["settings"]["parallelism"]["dp"] == layout.dp
    assert m["settings"]["grad_accumulation"] == accumulation
    tokens = 2 * layout.dp * accumulation * 64
    assert m["measured"]["tokens_per_s"] == pytest.approx(tokens / m["measured"]["step_time_s"])
    assert sum(m["losses"][-3:]) / 3 < sum(m["losses"][:3]) / 3 - 0.3, m["losses"]
    # every rank evaluated (FSDP and TP need all ranks in a forward); rank 0's held-out curve is reported
    heldout = m["heldout_losses"]
    assert [step for step, _ in heldout] == [0, 5, 10, 13] and heldout[-1][1] < heldout[0][1] - 0.3, heldout
    assert m["settings"]["deterministic"] is True
