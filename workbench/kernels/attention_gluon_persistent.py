"""The persistent variant of the Gluon attention forward (``attention_gluon``, config ``PERSISTENT=True``).

The one-tile kernel launches a program per (query tile, b * Hq): with a short causal sequence (S = 512, 128-row
tiles: 2.5 key blocks a tile on average) each program's prologue (barrier init, the Q and first K/V loads, the
lone S_0 GEMM) and epilogue (the last P V, the O and lse stores) is a large share of its life, and nothing of the
same CTA hides it. Here (FA3's persistent scheduler, Shah et al. 2024, arXiv:2407.08608, section 3.1 and
``hopper/tile_scheduler.hpp``) the grid is min(tiles, SMs x CTAS_PER_SM) programs and each walks the tiles
``tile = program_id, + num_programs, ...`` in the one-tile grid's launch order: causal tiles longest first (the
query-tile axis reversed and outermost, so every program's share of the work is near equal; with config
``L2_SECTION_MIB`` per section of heads whose K/V fit in L2, FA3's L2 swizzle: ``attention_gluon._causal_tile``),
full ones a head's tiles together. The partitions are the one-tile kernel's (``attention_gluon._load_tile``,
``_attend_tile``), run once per tile of the program:

- The TMA warp runs ahead of the consumers by as much as the rings allow: while they finish tile t's last
  softmax, P V and stores it is already loading tile t+1's Q (into the other of two Q buffers) and first K/V
  blocks, so the next tile's prologue finds its operands in shared memory.
- Barrier phases continue across tiles. The K/V rings are counted per program, not per tile: ``it`` is the
  number of key blocks this program has loaded (or consumed) before the tile, so block j of the tile is ring
  load it + j, slot (it + j) % NUM_STAGES, ready-parity ((it + j) // NUM_STAGES) & 1 (empty-parity the
  opposite). The ping-pong turns are counted the same way: a tile of n blocks takes n + 1 turns (the lone S_0,
  n - 1 overlapped steps, the last P V), so tile number i of the program starts at turn it + i. Q buffer
  i % 2 holds tile i; its ready barrier completes once per use (parity (i // 2) & 1) and each consumer
  releases its own 64 rows after the tile's last wgmma (``q_empty``, which the producer waits on at the
  opposite parity before reloading the buffer, two tiles later).

With config ``CARRY_TILES`` a tile's last P V is issued in one turn with the next tile's S_0 (``_carried_tiles``):
a tile of n blocks then takes n turns, only the program's first S_0 and last P V stand alone, and O and lse are
bitwise the same. On the H200 it lost 1-7% on the short causal shapes it was meant for (a01) and gained 2-8% on
some mid ones (``benchmarks/results/h200/kernels/attention_carry/``), so config=None does not set it.

With config ``BALANCED_TILES`` the programs take their tiles from a table built on the host instead
(``balanced_tile_table``): the launch order dealt out longest-processing-time first, each tile to the program
with the least work so far (a tile costs its key blocks plus TILE_OVERHEAD_BLOCKS). The stride order gives
every program the same number of tiles but one, whatever they cost: at B=16, S=512, 32 heads (2,048 tiles of
1-4 key blocks over 132 programs) 68 programs walk 16 tiles and 40 key blocks, 64 walk 15 and 36-39. Every
partition reads the same table entry, the next one loaded under the current tile.

With config ``L2_STAGGER`` (causal, with ``L2_SECTION_MIB``) the table holds the staggered order of
``staggered_launch_order``: each round one section's longest tiles next to the shorter tiles of the sections
before it, so HBM reads of new K/V and the L2-fed tiles of older sections run side by side. The kernel reads its
tiles from the table unsectioned (``SECTIONED`` off), dealt greedily with ``BALANCED_TILES``, else by stride.

Shared memory: the one-tile kernel's plus one more Q buffer (``attention_gluon.shared_bytes``); d=128 with
128 x 128 tiles: 2 K/V stages (192 KiB of 227). O is stored from registers as in the one-tile kernel, or with
``O_TMA_STORE`` through one more [64, D] tile a consumer and a TMA store (224 KiB: config=None's d=128 buckets; at
a01 it halves the L2 sectors O is written in and takes the forward from 0.73 to 0.79-0.83 of cuDNN,
``benchmarks/results/h200/kernels/attention_o_tma/``).
"""

from __future__ import annotations

import heapq

from workbench.kernels.attention_gluon import HAS_GLUON

Q_BUFFERS = 2
"""Q tiles in flight per consumer: the tile being computed and the next one the producer loads meanwhile."""
TILE_OVERHEAD_BLOCKS = 1.0
"""What one tile costs beyond its key blocks (its lone S_0, last P V and O store, in key-block steps) in the
``BALANCED_TILES`` table's cost model: a guess, calibrate me from the H200 times of tiles of 1-4 key blocks."""


def launch_order_tile(tile: int, tiles_m: int, batch_heads: int, section_heads: int, causal: bool) -> tuple[int, int]:
    """(query tile, b * Hq + h) of linear tile number ``tile``: the host twin of ``_persistent_tile``
    (section_heads = batch_heads: unsectioned)."""
    if not causal:
        return tile % tiles_m, tile // tiles_m
    first = tile // (section_heads * tiles_m) * section_heads
    rank = tile - first * tiles_m
    heads = min(section_heads, batch_heads - first)
    return tiles_m - 1 - rank // heads, first + rank % heads


def staggered_launch_order(tiles_m: int, batch_heads: int, section_heads: int) -> list[int]:
    """Config ``L2_STAGGER``: the causal tiles in staggered sections of section_heads heads, as the tile numbers the
    kernel reads from its table unsectioned (kind * batch_heads + b * Hq + h, kind 0 the longest: query tile
    tiles_m - 1 - kind). Round r runs section r's longest tiles, then section r - 1's next longest, ..., then
    section r - tiles_m + 1's shortest. So in every round one section's K/V comes from HBM while the tiles of the
    tiles_m - 1 sections before it find theirs in L2 (tiles_m sections live), instead of each section's longest
    tiles all reading HBM at once and its shorter ones then leaving HBM idle."""
    sections = -(-batch_heads // section_heads)
    order = []
    for round_ in range(sections + tiles_m - 1):
        for kind in range(tiles_m):
            section = round_ - kind
            if 0 <= section < sections:
                first = section * section_heads
                order += range(kind * batch_heads + first, kind * batch_heads + min(first + section_heads, batch_heads))
    return order


def tile_table(seq_len: int, batch_heads: int, section_heads: int, programs: int, block_m: int, block_n: int,
               causal: bool, stagger: bool = False, greedy: bool = True) -> list[int]:
    """The host-built tile table of configs ``BALANCED_TILES`` and ``L2_STAGGER``: programs + 1 offsets, then the
    tile numbers, program p's at [offsets[p], offsets[p + 1]) in launch order, then one pad entry (the kernel loads
    one tile ahead). The launch order is the sectioned one (numbers as ``launch_order_tile`` reads them) or, with
    ``stagger``, ``staggered_launch_order``'s (unsectioned numbers). ``greedy`` deals it out each tile to the program
    with the least cost so far (ties: the lowest program, so the first round is the stride order's; longest first
    within a section, Graham's LPT rule); else program p takes every programs-th tile from the p-th, as without a
    table."""
    tiles_m = -(-seq_len // block_m)
    if stagger:
        order = staggered_launch_order(tiles_m, batch_heads, section_heads)
        query_tiles = [tiles_m - 1 - tile // batch_heads for tile in order]
    else:
        order = list(range(tiles_m * batch_heads))
        query_tiles = [launch_order_tile(tile, tiles_m, batch_heads, section_heads, causal)[0] for tile in order]
    owned: list[list[int]] = [[] for _ in range(programs)]
    if greedy:
        loads = [(0.0, p) for p in range(programs)]
        for tile, pid_m in zip(order, query_tiles):
            rows_end = min(pid_m * block_m + block_m, seq_len) if causal else seq_len
            cost, p = heapq.heappop(loads)
            owned[p].append(tile)
            heapq.heappush(loads, (cost + TILE_OVERHEAD_BLOCKS + -(-rows_end // block_n), p))
    else:
        for p in range(programs):
            owned[p] = order[p::programs]
    offsets = [0]
    for tiles in owned:
        offsets.append(offsets[-1] + len(tiles))
    return offsets + [tile for tiles in owned for tile in tiles] + [0]


def balanced_tile_table(seq_len: int, batch_heads: int, section_heads: int, programs: int, block_m: int,
                        block_n: int, causal: bool) -> list[int]:
    """The ``BALANCED_TILES`` table: the sectioned launch order dealt out greedily (``tile_table``)."""
    return tile_table(seq_len, batch_heads, section_heads, programs, block_m, block_n, causal)


if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

    from workbench.kernels.attention_gluon import (_attend_tile, _causal_tile, _first_block, _last_pv, _load_tile,
                                                   _mma_layout, _overlapped_step, _p_layout, _release, _store_lse,
                                                   _store_o, _tile_geometry, _tile_steps)

    _Q_BUFFERS = gl.constexpr(Q_BUFFERS)

    @gluon.jit
    def _persistent_tile(tile, tiles_m, batch_heads, section_heads, CAUSAL: gl.constexpr,
                         SECTIONED: gl.constexpr):
        """(query tile, b * Hq + h) of linear tile number ``tile``, in the one-tile grid's launch order."""
        if CAUSAL and SECTIONED:  # per section of section_heads heads, its longest tiles first
            return _causal_tile(tile, tiles_m, batch_heads, section_heads)
        if CAUSAL:  # every head's last query tile first: the longest tiles start first
            return tiles_m - 1 - tile // batch_heads, tile % batch_heads
        return tile % tiles_m, tile // tiles_m

    @gluon.jit
    def _program_slots(order_ptr, total, TABLE: gl.constexpr):
        """(first, end, step) of this program's slots: TABLE, its run of the table; else tile program_id,
        + num_programs, ... of the launch order."""
        if TABLE:
            return gl.load(order_ptr + gl.program_id(0)), gl.load(order_ptr + gl.program_id(0) + 1), 1
        return gl.program_id(0), total, gl.num_programs(0)

    @gluon.jit
    def _table_tile(order_ptr, slot):
        """The linear tile number in slot ``slot`` of the table (its entries after the programs + 1 offsets)."""
        return gl.load(order_ptr + gl.num_programs(0) + 1 + slot)

    @gluon.jit
    def _first_tile(order_ptr, first, TABLE: gl.constexpr):
        """What ``_slot_tile`` reads as the first slot's tile: TABLE, the table's entry (loaded before the loop);
        else the slot itself."""
        if TABLE:
            return _table_tile(order_ptr, first)
        return first

    @gluon.jit
    def _slot_tile(order_ptr, slot, next_tile, TABLE: gl.constexpr):
        """(the linear tile of slot ``slot``, the value to pass for the next slot). TABLE: the entry loaded one
        slot ahead, and the next entry's load, in flight under this tile (the last reads the table's pad); else the
        slot itself (the launch order)."""
        if TABLE:
            return next_tile, _table_tile(order_ptr, slot + 1)
        return slot, next_tile

    @gluon.jit
    def _tile_at(tile, tiles_m, batch_heads, section_heads, seq_len, heads_q, group, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, SECTIONED: gl.constexpr):
        """(start_m, q_row, kv_row, n_full, n_blocks) of linear tile ``tile`` (``_persistent_tile``, then
        attention_gluon's ``_tile_geometry``): the loader and the consumers walk the same tiles."""
        pid_m, bh = _persistent_tile(tile, tiles_m, batch_heads, section_heads, CAUSAL, SECTIONED)
        return _tile_geometry(pid_m, bh, seq_len, heads_q, group, BLOCK_M, BLOCK_N, CAUSAL)

    @gluon.jit
    def _persistent_loader(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready,
                           k_empty, v_empty, order_ptr, seq_len, heads_q, group, batch_heads, section_heads,
                           CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                           SECTIONED: gl.constexpr, TABLE: gl.constexpr):
        """The TMA warp: every tile of this program in turn; Q buffer i % 2 once both consumers released it."""
        ROWS: gl.constexpr = q_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        BLOCK_M: gl.constexpr = ROWS * NUM_CONSUMERS
        tiles_m = gl.cdiv(seq_len, BLOCK_M)
        it = 0  # key blocks loaded by this program so far: the rings' load counter
        i = 0  # tiles of this program so far
        first, end, step = _program_slots(order_ptr, tiles_m * batch_heads, TABLE)
        next_tile = _first_tile(order_ptr, first, TABLE)
        for slot in range(first, end, step):
            tile, next_tile = _slot_tile(order_ptr, slot, next_tile, TABLE)
            start_m, q_row, kv_row, n_full, n_blocks = _tile_at(tile, tiles_m, batch_heads, section_heads, seq_len,
                                                                heads_q, group, BLOCK_M, BLOCK_N, CAUSAL, SECTIONED)
            q_slot = (i % _Q_BUFFERS) * NUM_CONSUMERS
            for w in gl.static_range(NUM_CONSUMERS):  # a fresh barrier passes parity 1: the first two tiles
                mbarrier.wait(q_empty.index(q_slot + w), ((i // _Q_BUFFERS) & 1) ^ 1)
            _load_tile(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty,
                       q_slot, q_row + start_m, kv_row, n_blocks, it, NUM_CONSUMERS, NUM_STAGES)
            it += n_blocks
            i += 1

    @gluon.jit
    def _persistent_consumer(q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty, turn,
                             o_ptr, lse_ptr, order_ptr, o_desc, seq_len, heads_q, group, batch_heads, section_heads,
                             qk_scale, CAUSAL: gl.constexpr, WG: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
                             NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr, SECTIONED: gl.constexpr,
                             TABLE: gl.constexpr, CARRY: gl.constexpr, O_TMA: gl.constexpr):
        """Consumer warpgroup WG: every tile of this program in turn (``_attend_tile``; CARRY: ``_carried_tiles``),
        the ring loads and the ping-pong turns counted from the program's first tile (module doc). O_TMA: O leaves
        through this consumer's shared tile after the Q slots (q_smem[Q_BUFFERS * NUM_CONSUMERS + WG])."""
        if CARRY:
            _carried_tiles(q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty, turn, o_ptr,
                           lse_ptr, order_ptr, seq_len, heads_q, group, batch_heads, section_heads, qk_scale, CAUSAL,
                           WG, NUM_CONSUMERS, NUM_STAGES, PINGPONG, SECTIONED, TABLE)
        else:
            ROWS: gl.constexpr = q_smem.shape[1]
            BLOCK_N: gl.constexpr = k_ring.shape[1]
            BLOCK_M: gl.constexpr = ROWS * NUM_CONSUMERS
            tiles_m = gl.cdiv(seq_len, BLOCK_M)
            it = 0  # key blocks consumed by this program so far
            i = 0  # tiles of this program so far; tile i took it_i + i turns before it
            first, end, step = _program_slots(order_ptr, tiles_m * batch_heads, TABLE)
            next_tile = _first_tile(order_ptr, first, TABLE)
            for slot in range(first, end, step):
                tile, next_tile = _slot_tile(order_ptr, slot, next_tile, TABLE)
                start_m, q_row, kv_row, n_full, n_blocks = _tile_at(tile, tiles_m, batch_heads, section_heads,
                                                                    seq_len, heads_q, group, BLOCK_M, BLOCK_N, CAUSAL,
                                                                    SECTIONED)
                q_slot = (i % _Q_BUFFERS) * NUM_CONSUMERS
                _attend_tile(q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr, lse_ptr,
                             o_desc, q_slot, (i // _Q_BUFFERS) & 1, start_m, q_row, n_full, n_blocks, it, it + i,
                             seq_len, qk_scale, CAUSAL, WG, NUM_STAGES, PINGPONG, O_TMA,
                             _Q_BUFFERS * NUM_CONSUMERS + WG)
                _release(q_empty, q_slot + WG)  # the tile's last QK^T retired inside _attend_tile
                it += n_blocks
                i += 1
            if O_TMA:
                tma.store_wait(0)  # the last O has left shared memory before the program ends

    @gluon.jit
    def _carried_tiles(q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty, turn, o_ptr,
                       lse_ptr, order_ptr, seq_len, heads_q, group, batch_heads, section_heads, qk_scale,
                       CAUSAL: gl.constexpr, WG: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                       PINGPONG: gl.constexpr, SECTIONED: gl.constexpr, TABLE: gl.constexpr):
        """Config CARRY_TILES: the consumer's tiles pipelined across their boundaries. A tile's last O += P V is
        issued with the next tile's S_0 = Q K_0^T (``_overlapped_step``'s HANDOVER), so the next tile's first
        softmax runs under it and the warpgroup never waits on a lone GEMM between tiles; the finished O is
        stored after that turn, and the program's last tile's P V and store follow the loop. Tile i (it_i key
        blocks before it) takes turns it_i .. it_i + n_blocks - 1, the last P V turn it_total; only the first
        tile has a lone S_0 (``_first_block``). Every warpgroup must run every key block of a tile, so causal
        64-key tiles (whose first consumer skips one, ``_attend_tile``) are refused (``resolve_config``)."""
        ROWS: gl.constexpr = q_smem.shape[1]
        HEAD_DIM: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_ring.shape[1]
        BLOCK_M: gl.constexpr = ROWS * NUM_CONSUMERS
        gl.static_assert(not (CAUSAL and BLOCK_N <= ROWS), "CARRY_TILES needs every key block on both consumers")
        ROW_LAYOUT: gl.constexpr = gl.SliceLayout(1, _mma_layout(BLOCK_N))
        O_ROWS: gl.constexpr = gl.SliceLayout(1, _mma_layout(HEAD_DIM))
        # The previous tile's state carried into the next tile's first turn: its last P and unfinished O, its row
        # sum, its first row (its lse is stored already, so its row max is not kept).
        acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=_mma_layout(HEAD_DIM))
        p_op = gl.zeros([ROWS, BLOCK_N], q_smem.dtype, layout=_p_layout(HEAD_DIM))
        l_i = gl.zeros([ROWS], gl.float32, layout=ROW_LAYOUT)
        row0 = 0
        q_row = 0
        tiles_m = gl.cdiv(seq_len, BLOCK_M)
        it = 0  # key blocks consumed by this program so far: tile i's block j is turn it_i + j
        i = 0
        first, end, step = _program_slots(order_ptr, tiles_m * batch_heads, TABLE)
        next_tile = _first_tile(order_ptr, first, TABLE)
        for slot in range(first, end, step):
            tile, next_tile = _slot_tile(order_ptr, slot, next_tile, TABLE)
            start_m, tile_row, kv_row, n_full, n_blocks = _tile_at(tile, tiles_m, batch_heads, section_heads,
                                                                   seq_len, heads_q, group, BLOCK_M, BLOCK_N, CAUSAL,
                                                                   SECTIONED)
            q_slot = (i % _Q_BUFFERS) * NUM_CONSUMERS + WG
            q_tile = q_smem.index(q_slot)
            tile_offs = start_m + WG * ROWS + gl.arange(0, ROWS, layout=ROW_LAYOUT)
            zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=_mma_layout(BLOCK_N))  # use_acc=False: unread
            no_max = gl.full([ROWS], float("-inf"), gl.float32, layout=ROW_LAYOUT)
            no_sum = gl.zeros([ROWS], gl.float32, layout=ROW_LAYOUT)
            mbarrier.wait(q_bar.index(q_slot), (i // _Q_BUFFERS) & 1)
            if i == 0:
                p_new, l_new, m_new = _first_block(q_tile, k_ring, k_ready, k_empty, turn, it, it, no_max, no_sum,
                                                   tile_offs, seq_len, qk_scale, zero_s, CAUSAL, WG, NUM_STAGES,
                                                   PINGPONG)
            else:  # the handover: the previous tile's last P V under this tile's first softmax, then its store
                p_new, acc, m_new, l_new = _overlapped_step(0, it, it, q_tile, k_ring, v_ring, k_ready, v_ready,
                                                            k_empty, v_empty, turn, p_op, acc, no_max, no_sum,
                                                            tile_offs, seq_len, qk_scale, zero_s, True, CAUSAL, WG,
                                                            NUM_STAGES, PINGPONG, True)
                _store_o(acc, l_i, row0 + gl.arange(0, ROWS, layout=O_ROWS), q_row, o_ptr, seq_len)
            acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=_mma_layout(HEAD_DIM))
            p_op, acc, m_i, l_i = _tile_steps(n_full, n_blocks, it, it, q_tile, k_ring, v_ring, k_ready, v_ready,
                                              k_empty, v_empty, turn, p_new, acc, m_new, l_new, tile_offs, seq_len,
                                              qk_scale, zero_s, CAUSAL, WG, NUM_STAGES, PINGPONG)
            _release(q_empty, q_slot)  # the tile's last QK^T has retired
            _store_lse(l_i, m_i, tile_offs, tile_row, lse_ptr, seq_len)  # the last P V changes neither l nor m
            row0 = start_m + WG * ROWS
            q_row = tile_row
            it += n_blocks
            i += 1
        if i > 0:
            acc = _last_pv(p_op, acc, v_ring, v_ready, v_empty, turn, it - 1, it, WG, NUM_STAGES, PINGPONG)
            _store_o(acc, l_i, row0 + gl.arange(0, ROWS, layout=O_ROWS), q_row, o_ptr, seq_len)

    @gluon.jit
    def _persistent_second_consumer(q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty,
                                    turn, o_ptr, lse_ptr, order_ptr, o_desc, seq_len, heads_q, group, batch_heads,
                                    section_heads, qk_scale, CAUSAL: gl.constexpr, NUM_STAGES: gl.constexpr,
                                    PINGPONG: gl.constexpr, SECTIONED: gl.constexpr, TABLE: gl.constexpr,
                                    CARRY: gl.constexpr, O_TMA: gl.constexpr):
        _persistent_consumer(q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty, turn,
                             o_ptr, lse_ptr, order_ptr, o_desc, seq_len, heads_q, group, batch_heads, section_heads,
                             qk_scale, CAUSAL, 1, 2, NUM_STAGES, PINGPONG, SECTIONED, TABLE, CARRY, O_TMA)

    @gluon.jit(do_not_specialize=["seq_len", "heads_q", "group", "batch_heads", "section_heads"])  # a build per config
    def attn_fwd_persistent_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr, order_ptr, o_desc, seq_len, heads_q,
                                   group, batch_heads, section_heads, qk_scale, CAUSAL: gl.constexpr,
                                   NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                                   SECTIONED: gl.constexpr, TABLE: gl.constexpr, CARRY: gl.constexpr,
                                   O_TMA: gl.constexpr, LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
        """Grid: (min(cdiv(S, BLOCK_M) x B * Hq, SMs x CTAS_PER_SM),); BLOCK_M = 64 NUM_CONSUMERS.

        Arguments as ``attention_gluon._attn_fwd_kernel``'s, plus batch_heads = B * Hq and order_ptr: the int32
        ``tile_table`` of this launch, read only when TABLE (configs BALANCED_TILES, L2_STAGGER), and o_desc: O's
        2-D view [B*Hq*S, D], block [64, D], read only when O_TMA (q's otherwise). Shared: Q
        [Q_BUFFERS * NUM_CONSUMERS, 64, D] (buffer i % 2, consumer w at (i % 2) * NUM_CONSUMERS + w; O_TMA: then
        one O tile a consumer), K and V
        rings [NUM_STAGES, BLOCK_N, D]; barriers: q_bar / q_empty per Q slot, ready / empty per ring slot, the
        two ping-pong turns."""
        ROWS: gl.constexpr = q_desc.block_type.shape[0]
        HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        Q_SLOTS: gl.constexpr = _Q_BUFFERS * NUM_CONSUMERS
        q_smem = gl.allocate_shared_memory(q_desc.dtype, [Q_SLOTS + NUM_CONSUMERS * O_TMA, ROWS, HEAD_DIM],
                                           q_desc.layout)
        k_ring = gl.allocate_shared_memory(k_desc.dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_ring = gl.allocate_shared_memory(v_desc.dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [Q_SLOTS, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [Q_SLOTS, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(Q_SLOTS):
            mbarrier.init(q_bar.index(i), count=1)
            mbarrier.init(q_empty.index(i), count=1)  # each consumer releases its own rows
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)  # every consumer releases every slot
            mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)
        for i in gl.static_range(2):
            mbarrier.init(turn.index(i), count=1)
        # The partition lists are written out in each call: a JIT function cannot be bound to a variable.
        if NUM_CONSUMERS == 2:
            gl.warp_specialize([
                (_persistent_consumer, (q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty,
                                        turn, o_ptr, lse_ptr, order_ptr, o_desc, seq_len, heads_q, group,
                                        batch_heads, section_heads, qk_scale, CAUSAL, 0, NUM_CONSUMERS, NUM_STAGES,
                                        PINGPONG, SECTIONED, TABLE, CARRY, O_TMA)),
                (_persistent_second_consumer, (q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready, k_empty,
                                               v_empty, turn, o_ptr, lse_ptr, order_ptr, o_desc, seq_len, heads_q,
                                               group, batch_heads, section_heads, qk_scale, CAUSAL, NUM_STAGES,
                                               PINGPONG, SECTIONED, TABLE, CARRY, O_TMA)),
                (_persistent_loader, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, q_empty, k_ready,
                                      v_ready, k_empty, v_empty, order_ptr, seq_len, heads_q, group, batch_heads,
                                      section_heads, CAUSAL, NUM_CONSUMERS, NUM_STAGES, SECTIONED, TABLE)),
            ], [4, 1], [CONSUMER_REGS, LOADER_REGS])
        else:
            gl.warp_specialize([
                (_persistent_consumer, (q_smem, k_ring, v_ring, q_bar, q_empty, k_ready, v_ready, k_empty, v_empty,
                                        turn, o_ptr, lse_ptr, order_ptr, o_desc, seq_len, heads_q, group,
                                        batch_heads, section_heads, qk_scale, CAUSAL, 0, NUM_CONSUMERS, NUM_STAGES,
                                        False, SECTIONED, TABLE, CARRY, O_TMA)),
                (_persistent_loader, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, q_empty, k_ready,
                                      v_ready, k_empty, v_empty, order_ptr, seq_len, heads_q, group, batch_heads,
                                      section_heads, CAUSAL, NUM_CONSUMERS, NUM_STAGES, SECTIONED, TABLE)),
            ], [1], [LOADER_REGS])
        for i in gl.static_range(Q_SLOTS):
            mbarrier.invalidate(q_bar.index(i))
            mbarrier.invalidate(q_empty.index(i))
        for i in gl.static_range(NUM_STAGES):
            mbarrier.invalidate(k_ready.index(i))
            mbarrier.invalidate(v_ready.index(i))
            mbarrier.invalidate(k_empty.index(i))
            mbarrier.invalidate(v_empty.index(i))
        for i in gl.static_range(2):
            mbarrier.invalidate(turn.index(i))
