"""A model of the Gluon attention backward's barrier protocol (workbench/kernels/attention_gluon_bwd.py:
``_load_partition``, ``_step``), run under random interleavings: mbarriers with arrival counts, transaction bytes
and phase parity as PTX defines them (``mbarrier.try_wait.parity`` passes once the phase of that parity has
completed; a fresh barrier's preceding phase, parity 1, counts as completed), TMA copies that land at any later
moment, wgmma reads of shared memory that last from their issue to their ``warpgroup_mma_wait``.

It checks, for every ring depth NUM_STAGES >= 2, one or two consumer warpgroups and the split dQ (two consumers,
D = 128): no deadlock, every read sees the fill of its own step, and no TMA copy or dS^T store lands on a buffer
while a read of its previous contents is in flight. Broken variants of the protocol (a release before the dV/dK
GEMMs retire, the producer's parity without its flip, one dS^T buffer a consumer instead of one a slot and
consumer) are caught, so a pass means something."""

import random

import pytest


class Barrier:
    """An mbarrier: ``count`` arrivals and the expected transaction bytes complete a phase."""

    def __init__(self, count: int):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def arrive(self):
        assert self.pending > 0, "more arrivals than the barrier's count in one phase"
        self.pending -= 1
        self._complete()

    def expect(self, nbytes: int):  # mbarrier.arrive.expect_tx: an arrival that also expects nbytes
        self.tx += nbytes
        self.arrive()

    def complete_tx(self, nbytes: int):  # a TMA copy landed
        self.tx -= nbytes
        assert self.tx >= 0, "more bytes landed than expected"
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def passed(self, parity: int) -> bool:
        return (self.phase & 1) != parity


class Buffer:
    """One shared-memory tile: the tag of what it holds and the reads of it in flight."""

    def __init__(self, name: str):
        self.name, self.tag, self.reading = name, None, 0

    def write(self, tag):
        assert self.reading == 0, f"{self.name} overwritten (with {tag}) while a read of {self.tag} is in flight"
        self.tag = tag

    def start_read(self, tag):
        assert self.tag == tag, f"{self.name} read for {tag} holds {self.tag}"
        self.reading += 1
        return self, tag

    @staticmethod
    def retire(*reads):
        for buffer, tag in reads:
            assert buffer.tag == tag, f"{buffer.name} changed under a read of {tag}"
            buffer.reading -= 1


def run(stages: int, consumers: int, split: bool, steps: int, seed: int, broken: str = "") -> None:
    """One random interleaving of the producer, the consumers and the TMA engine; raises AssertionError on a
    hazard or a deadlock."""
    rng = random.Random(seed)
    q_ready, do_ready = [Barrier(1) for _ in range(stages)], [Barrier(1) for _ in range(stages)]
    ds_ready, empty = [Barrier(consumers) for _ in range(stages)], [Barrier(consumers) for _ in range(stages)]
    q, lse, do, delta = ([Buffer(f"{n}[{s}]") for s in range(stages)] for n in ("q", "lse", "do", "delta"))
    ds_slots = 1 if broken == "ds per consumer" else stages
    ds = [[Buffer(f"ds[{s}][{w}]") for w in range(consumers)] for s in range(ds_slots)]
    landings = []  # TMA copies issued, not landed: (buffer, tag, barrier, bytes)

    def producer():
        for step in range(steps):
            slot, fill = step % stages, step // stages
            parity = (fill & 1) if broken == "parity without flip" else (fill & 1) ^ 1
            yield lambda: empty[slot].passed(parity)
            q_ready[slot].expect(2)  # Q_i and its lse rows: one "byte" each here
            landings.extend([(q[slot], step, q_ready[slot], 1), (lse[slot], step, q_ready[slot], 1)])
            do_ready[slot].expect(2)
            landings.extend([(do[slot], step, do_ready[slot], 1), (delta[slot], step, do_ready[slot], 1)])

    def consumer(wg: int):
        for step in range(steps):
            slot, phase = step % stages, (step // stages) & 1
            mine = ds[step % ds_slots]
            yield lambda: q_ready[slot].passed(phase)
            s_read = q[slot].start_read(step)  # S^T = K Q^T, async
            yield lambda: do_ready[slot].passed(phase)
            dp_read = do[slot].start_read(step)  # dP^T = V dO^T, async
            yield None
            Buffer.retire(s_read)  # warpgroup_mma_wait(1)
            Buffer.retire(lse[slot].start_read(step))  # lse from shared memory into registers
            yield None
            Buffer.retire(dp_read)  # warpgroup_mma_wait(0)
            Buffer.retire(delta[slot].start_read(step))
            dv_dk = do[slot].start_read(step), q[slot].start_read(step)  # dV += P^T dO, dK += dS^T Q, async
            mine[wg].write(step)  # dS^T to shared memory (stores, fence, the partition's barrier)
            if split:
                ds_ready[slot].arrive()
            if broken == "release before retire":
                empty[slot].arrive()
            yield None
            Buffer.retire(*dv_dk)  # warpgroup_mma_wait(0)
            if split:  # dQ columns of this warpgroup over both consumers' keys
                yield lambda: ds_ready[slot].passed(phase)
                reads = [mine[i].start_read(step) for i in range(consumers)]
            else:
                reads = [mine[wg].start_read(step)]
            yield None
            Buffer.retire(*reads)  # dQ's wgmma waited; then the atomics
            if broken != "release before retire":
                empty[slot].arrive()  # after the partition's barrier: every warp is past its last wait

    actors = [producer(), *(consumer(wg) for wg in range(consumers))]
    waiting = [None] * len(actors)  # each actor's wait condition (None: ready to go on)
    while actors:
        ready = [i for i, cond in enumerate(waiting) if cond is None or cond()]
        if not ready and not landings:
            raise AssertionError(f"deadlock with {len(actors)} actors blocked")
        if landings and (not ready or rng.random() < 0.4):
            buffer, tag, barrier, nbytes = landings.pop(rng.randrange(len(landings)))
            buffer.write(tag)
            barrier.complete_tx(nbytes)
            continue
        i = rng.choice(ready)
        try:
            waiting[i] = next(actors[i])
        except StopIteration:
            del actors[i], waiting[i]
    assert not landings


CASES = [(consumers, split) for consumers, split in ((1, False), (2, False), (2, True))]


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("consumers, split", CASES)
@pytest.mark.parametrize("steps", [1, 2, 5, 9])
def test_the_protocol_is_safe_for_every_ring_depth(stages, consumers, split, steps):
    for seed in range(150):
        run(stages, consumers, split, steps, seed)


@pytest.mark.parametrize("broken, consumers, split", [("release before retire", 1, False),
                                                      ("parity without flip", 2, False),
                                                      ("ds per consumer", 2, True)])
def test_the_model_catches_a_broken_protocol(broken, consumers, split):
    caught = 0
    for seed in range(300):
        try:
            run(2, consumers, split, 6, seed, broken)
        except AssertionError:
            caught += 1
    assert caught, f"{broken}: no interleaving showed the fault"
