"""The model catalog: typed model descriptions loaded from ``specs/models/*.yaml``.

Three families: decoder-only transformers (dense or mixture-of-experts), DLRM (embedding tables + MLPs + a
DCNv2 interaction) and HSTU-style generative recommenders; what each trains as, and which parallelisms and stacks
apply to it, its family says (``workbench.families``; a family added there reads its own catalog entries). User
models come from a YAML/dict with the same schema, or from a Hugging Face ``config.json`` parsed locally
(``from_hf_config``, ``workbench.hf_config``; no network), for the architectures the transformer model implements.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Union

from workbench._data import specs_dir
from workbench.catalog import Catalog
from workbench.errors import SpecError, UnknownNameError
from workbench.families import family_names, get_family, is_registered_model
from workbench.schema import Fields, load_yaml


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2/V3; DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", Sec. 2.1.1):
    the hidden state is projected down to a query latent and a key/value latent (each RMS-normed), and up again to
    per-head queries, keys and values. A head's query/key is a position-free part and a RoPE part; the RoPE key is
    one per token, shared by every head. Keys and values have different widths (192 and 128 in DeepSeek-V3)."""

    q_lora_rank: int
    """Query latent width; 0: queries are projected straight from the hidden state (DeepSeek-V2-Lite)."""
    kv_lora_rank: int
    """Key/value latent width."""
    qk_nope_head_dim: int
    """Per-head query/key width without position encoding."""
    qk_rope_head_dim: int
    """Per-head query/key width with RoPE (the key's is shared by all heads)."""
    v_head_dim: int
    """Per-head value width (also the attention output's)."""

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class BlockKind:
    """What tells one block of a model from another: its FFN (routed experts or dense) and its attention's reach.
    A model whose blocks are all alike has one kind (``TransformerModel.block_kinds``)."""

    moe: bool
    """Routed experts (and the shared ones); False: a dense FFN."""
    window: int = 0
    """Keys a query sees (``TransformerModel.window_kind``); 0: every earlier one (full causal attention)."""


@dataclass(frozen=True)
class TransformerModel:
    """A decoder-only transformer (Llama/GPT/Mixtral/Qwen3/DeepSeek-V3/GPT-OSS/Llama 4 family).

    Blocks may differ in two ways (``block_kinds``): an MoE model's ``dense_layers`` run a dense FFN instead of
    experts, and ``windowed_layers`` attend over a window of keys instead of every earlier one. Every other field
    holds for every block."""

    name: str
    display_name: str
    source: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    """Key/value heads: equal to num_heads for MHA, fewer for GQA."""
    ffn_hidden_size: int
    """Width of one (expert) FFN: the gate/up projection's output per branch."""
    ffn_activation: Literal["swiglu", "gelu"] = "swiglu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    tied_embeddings: bool = False
    num_experts: int = 1
    """Routed experts per MoE layer; 1 means a dense FFN."""
    experts_per_token: int = 1
    """Top-k routing."""
    default_seq_len: int = 4096
    head_dim: int = 0
    """0 derives hidden_size / num_heads (with ``latent_attention``: its query/key head width)."""
    shared_experts: int = 0
    """Experts every token of an MoE layer passes through beside its routed top-k (DeepSeek-V3, Llama 4: 1)."""
    shared_expert_ffn_size: int = 0
    """Width of one shared expert's FFN; 0: ffn_hidden_size."""
    dense_layers: tuple[int, ...] = ()
    """Indices of an MoE model's layers with a dense FFN instead of experts (DeepSeek-V3's first 3)."""
    dense_ffn_hidden_size: int = 0
    """Width of those layers' dense FFN; 0: ffn_hidden_size."""
    qk_norm: bool = False
    """Per-head RMSNorm of queries and keys before RoPE (Qwen3; Llama 4's weightless L2 norm)."""
    attention_window: int = 0
    """Keys a query of a windowed layer sees; 0: no windowed layers."""
    window_kind: Literal["sliding", "chunked"] = "sliding"
    """sliding: the ``attention_window`` latest keys (GPT-OSS); chunked: the keys of the query's own chunk of
    ``attention_window`` tokens (Llama 4)."""
    windowed_layers: tuple[int, ...] = ()
    """Indices of the layers that attend over the window (the rest attend over every earlier key)."""
    latent_attention: LatentAttention | None = None
    """Multi-head latent attention in place of the q/k/v projections (then num_kv_heads equals num_heads)."""
    kind: Literal["transformer"] = "transformer"
    approximation: str | None = None
    """What this model leaves out of the architecture it was read from (``from_hf_config`` with
    ``approximate_as``, or a config it had to assume things about); every prediction repeats it in its notes."""

    def __post_init__(self):
        if self.head_dim == 0:
            derived = self.latent_attention.qk_head_dim if self.latent_attention else self.hidden_size // self.num_heads
            object.__setattr__(self, "head_dim", derived)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def shared_expert_size(self) -> int:
        """FFN width of one shared expert."""
        return self.shared_expert_ffn_size or self.ffn_hidden_size

    @property
    def dense_ffn_size(self) -> int:
        """FFN width of a dense block: ``dense_ffn_hidden_size`` in an MoE model, else ``ffn_hidden_size``."""
        return (self.dense_ffn_hidden_size or self.ffn_hidden_size) if self.is_moe else self.ffn_hidden_size

    # -- the kinds of block and where they are
    def layer_kind(self, layer: int) -> BlockKind:
        """The kind of block at index ``layer``."""
        return BlockKind(moe=self.is_moe and layer not in self.dense_layers,
                         window=self.attention_window if layer in self.windowed_layers else 0)

    def block_kinds(self, layers: range | None = None) -> tuple[tuple[BlockKind, int], ...]:
        """(kind, blocks of that kind) over ``layers`` (all of them by default), in order of first appearance."""
        layers = range(self.num_layers) if layers is None else layers
        if not self.dense_layers and not self.windowed_layers:  # every block alike: the common case, kept fast
            return ((BlockKind(self.is_moe), len(layers)),) if len(layers) else ()
        counts: dict[BlockKind, int] = {}
        for layer in layers:
            kind = self.layer_kind(layer)
            counts[kind] = counts.get(kind, 0) + 1
        return tuple(counts.items())

    def stage_blocks(self, pp: int) -> tuple[tuple[BlockKind, int], ...]:
        """``block_kinds`` of the busiest of ``pp`` contiguous pipeline stages of ceil(num_layers / pp) blocks
        each (the last may hold fewer): the one with the most blocks, then the most active parameters, then the
        most full-attention blocks (an interleaved schedule's chunks are not placed: the split is contiguous)."""
        per_stage = -(-self.num_layers // pp)
        if not self.dense_layers and not self.windowed_layers:
            return self.block_kinds(range(per_stage))
        stages = [self.block_kinds(range(s * per_stage, min(self.num_layers, (s + 1) * per_stage)))
                  for s in range(pp)]
        return max(stages, key=lambda blocks: (sum(n for _, n in blocks),
                                               sum(n * self.active_block_params(k) for k, n in blocks),
                                               sum(n for k, n in blocks if not k.window)))

    def typical_block(self) -> BlockKind:
        """The kind most of the model's blocks are (the first such)."""
        return max(self.block_kinds(), key=lambda item: item[1])[0]

    def non_llama_features(self) -> tuple[str, ...]:
        """What of this model's blocks a Llama-style dense block lacks, in the field's words (the stack tables'
        scope: ``workbench.graph.stacked.transformer_scope_gap``); () for a Llama/Mixtral-style model."""
        features = (("multi-head latent attention", self.latent_attention is not None),
                    ("query/key norm", self.qk_norm),
                    (f"{self.window_kind}-window attention", bool(self.windowed_layers)),
                    ("shared experts", self.shared_experts > 0),
                    ("dense and MoE layers", bool(self.dense_layers)))
        return tuple(name for name, present in features if present)

    # -- parameters
    def attention_params(self) -> int:
        """Parameters of one block's attention (its projections and, with ``qk_norm``, the q/k norm weights)."""
        h = self.hidden_size
        mla = self.latent_attention
        if mla is None:
            qk_norm = 2 * self.head_dim if self.qk_norm else 0
            return h * (self.q_size + 2 * self.kv_size) + self.q_size * h + qk_norm
        heads = self.num_heads
        if mla.q_lora_rank:  # down, its norm, up
            q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * heads * mla.qk_head_dim
        else:
            q = h * heads * mla.qk_head_dim
        kv = (h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
              + mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim))
        return q + kv + heads * mla.v_head_dim * h

    def _ffn_params(self, width: int) -> int:
        branches = 3 if self.ffn_activation == "swiglu" else 2  # gate+up+down vs up+down
        return branches * self.hidden_size * width

    def expert_params(self, kind: BlockKind) -> int:
        """Parameters of a block's routed experts (0 for a dense block)."""
        return self._ffn_params(self.ffn_hidden_size) * self.num_experts if kind.moe else 0

    def block_params(self, kind: BlockKind) -> int:
        """Parameters of one block of ``kind``: attention, FFN (routed and shared experts and the router, or the
        dense FFN), norms."""
        h = self.hidden_size
        if kind.moe:
            shared = self._ffn_params(self.shared_expert_size) * self.shared_experts
            ffn = self.expert_params(kind) + shared + h * self.num_experts  # experts + router
        else:
            ffn = self._ffn_params(self.dense_ffn_size)
        norms = 2 * h * (2 if self.norm == "layernorm" else 1)
        return self.attention_params() + ffn + norms

    def active_block_params(self, kind: BlockKind) -> int:
        """Parameters one token touches in a block of ``kind`` (its top-k routed experts only)."""
        inactive = self._ffn_params(self.ffn_hidden_size) * (self.num_experts - self.experts_per_token) if kind.moe else 0
        return self.block_params(kind) - inactive

    def layer_params(self) -> int:
        """Parameters of one transformer block (attention + FFN/experts + norms); with more than one kind of block,
        the largest kind's (what FSDP gathers for one block at a time)."""
        return max(self.block_params(kind) for kind, _ in self.block_kinds())

    def expert_params_per_layer(self) -> float:
        """Routed-expert parameters per block, over all the model's blocks: one MoE layer's when every block is one
        (0 for a dense model). A stage's own: ``stage_expert_params``."""
        total = sum(n * self.expert_params(kind) for kind, n in self.block_kinds())
        return total // self.num_layers if total % self.num_layers == 0 else total / self.num_layers

    def stage_expert_params(self, pp: int) -> int:
        """Routed-expert parameters of the busiest pipeline stage's blocks (``stage_blocks``)."""
        return sum(n * self.expert_params(kind) for kind, n in self.stage_blocks(pp))

    def stage_moe_layers(self, pp: int) -> int:
        """MoE blocks on the busiest pipeline stage (each sends its tokens to their experts and back)."""
        return sum(n for kind, n in self.stage_blocks(pp) if kind.moe)

    def params_per_gpu(self, tp: int, pp: int, dp: int, ep: int, sharded: bool) -> float:
        """Parameters one GPU holds (the busiest pipeline stage, embeddings included). Dense weights (shared experts
        included) split tp x pp ways and, when ``sharded`` (FSDP), dp ways; routed experts split ep ways by expert
        parallelism and, under FSDP, over the rest of the dp group too, so dp ways in all."""
        stage = self.stage_blocks(pp)
        experts = sum(n * self.expert_params(kind) for kind, n in stage) / tp
        dense = (sum(n * (self.block_params(kind) - self.expert_params(kind)) for kind, n in stage) / tp
                 + self.embedding_params() / tp)
        return dense / (dp if sharded else 1) + experts / (dp if sharded else ep)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of a block, unsharded, by the names LoRA targets use (one
        expert's for an MoE FFN): q, k, v, o (latent attention: q_a, q_b, kv_a, kv_b, o) and gate, up, down (no
        gate in an ungated FFN)."""
        h, f = self.hidden_size, self.ffn_hidden_size
        mla = self.latent_attention
        if mla is None:
            shapes = {"q": (h, self.q_size), "k": (h, self.kv_size), "v": (h, self.kv_size), "o": (self.q_size, h)}
        else:
            heads = self.num_heads
            shapes = ({"q_a": (h, mla.q_lora_rank), "q_b": (mla.q_lora_rank, heads * mla.qk_head_dim)}
                      if mla.q_lora_rank else {"q": (h, heads * mla.qk_head_dim)})
            shapes.update(kv_a=(h, mla.kv_lora_rank + mla.qk_rope_head_dim),
                          kv_b=(mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim)),
                          o=(heads * mla.v_head_dim, h))
        if self.ffn_activation == "swiglu":
            shapes["gate"] = (h, f)
        shapes.update(up=(h, f), down=(f, h))
        return shapes

    def lora_params_per_layer(self, rank: int, targets: tuple[str, ...]) -> int:
        """Adapter parameters of one block: rank x (in + out) per targeted linear (A is [in, r], B is [r, out];
        Hu et al. 2021, LoRA), one adapter per expert on an MoE FFN's linears."""
        shapes = self.linear_shapes()
        per_target = {t: rank * sum(shapes[t]) * (self.num_experts if t in ("gate", "up", "down") else 1)
                      for t in targets}
        return sum(per_target.values())

    def active_layer_params(self) -> int:
        """Parameters one token touches in a block (top-k experts only); with more than one kind of block, the
        typical kind's (``typical_block``)."""
        return self.active_block_params(self.typical_block())

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    @property
    def num_params(self) -> int:
        final_norm = self.hidden_size * (2 if self.norm == "layernorm" else 1)
        blocks = sum(n * self.block_params(kind) for kind, n in self.block_kinds())
        return blocks + self.embedding_params() + final_norm

    @property
    def num_active_params(self) -> int:
        inactive = sum(n * (self.block_params(kind) - self.active_block_params(kind)) for kind, n in self.block_kinds())
        return self.num_params - inactive


@dataclass(frozen=True)
class EmbeddingTable:
    rows: int
    dim: int
    pooling: int = 1
    """Lookups per sample (multi-hot size), sum-pooled."""


@dataclass(frozen=True)
class DLRMModel:
    """DLRM with a DCNv2 interaction (MLPerf DLRM-DCNv2)."""

    name: str
    display_name: str
    source: str
    num_dense_features: int
    tables: tuple[EmbeddingTable, ...]
    bottom_mlp: tuple[int, ...]
    """Layer widths after the dense input, e.g. (512, 256, 128)."""
    top_mlp: tuple[int, ...]
    cross_layers: int
    cross_low_rank: int
    default_batch: int = 65536
    kind: Literal["dlrm"] = "dlrm"

    @property
    def embedding_dim(self) -> int:
        return self.tables[0].dim

    @property
    def interaction_width(self) -> int:
        """Concatenated bottom-MLP output and pooled embeddings: the DCN input."""
        return self.bottom_mlp[-1] + sum(t.dim for t in self.tables)

    def mlp_layers(self) -> list[tuple[str, int, int]]:
        """(name, in, out) of every dense layer, DCN low-rank projections included."""
        layers = []
        widths = (self.num_dense_features, *self.bottom_mlp)
        layers += [(f"bottom_mlp.{i}", a, b) for i, (a, b) in enumerate(zip(widths, widths[1:]))]
        d = self.interaction_width
        for i in range(self.cross_layers):
            layers += [(f"cross.{i}.down", d, self.cross_low_rank), (f"cross.{i}.up", self.cross_low_rank, d)]
        widths = (d, *self.top_mlp)
        layers += [(f"top_mlp.{i}", a, b) for i, (a, b) in enumerate(zip(widths, widths[1:]))]
        return layers

    @property
    def dense_params(self) -> int:
        return sum(a * b + b for _, a, b in self.mlp_layers())

    @property
    def embedding_params(self) -> int:
        return sum(t.rows * t.dim for t in self.tables)

    @property
    def num_params(self) -> int:
        return self.dense_params + self.embedding_params


@dataclass(frozen=True)
class HSTUModel:
    """HSTU-style generative recommender: item/action embeddings feeding a stack of HSTU blocks."""

    name: str
    display_name: str
    source: str
    item_table_rows: int
    embedding_dim: int
    """Equals the model width: item embeddings enter the blocks directly."""
    num_layers: int
    num_heads: int
    attention_dim: int
    """Per-head query/key width."""
    linear_dim: int
    """Per-head value/gating width."""
    default_seq_len: int = 2048
    default_batch: int = 64
    kind: Literal["hstu"] = "hstu"

    @property
    def uvqk_width(self) -> int:
        """Columns of the U/V/Q/K projection: per head two linear and two attention widths."""
        return self.num_heads * (2 * self.linear_dim + 2 * self.attention_dim)

    @property
    def output_in_width(self) -> int:
        """K of the output projection: ``cat([u, attn, norm(attn) * u])``, three times heads x linear_dim
        (generative-recommenders ``modules/stu.py`` at db1bf8f: ``_output_weight`` is
        ``[hidden_dim * num_heads * 3, embedding_dim]``, ``hstu_compute_output(concat_u=True, concat_x=True)``)."""
        return 3 * self.num_heads * self.linear_dim

    def layer_params(self) -> int:
        """One STU layer's parameters (``modules/stu.py`` at db1bf8f): the uvqk weight and bias, the output
        weight, the input norm's and the output norm's weight and bias."""
        d = self.embedding_dim
        uvqk = (d + 1) * self.uvqk_width
        out = self.output_in_width * d
        return uvqk + out + 2 * d + 2 * self.num_heads * self.linear_dim

    @property
    def dense_params(self) -> int:
        return self.num_layers * self.layer_params()

    @property
    def embedding_params(self) -> int:
        return self.item_table_rows * self.embedding_dim

    @property
    def num_params(self) -> int:
        return self.dense_params + self.embedding_params


Model = Union[TransformerModel, DLRMModel, HSTUModel]
"""The catalog's built-in model types (a registered family may add its own: ``workbench.families``)."""
MODEL_KINDS = ("transformer", "dlrm", "hstu")
"""The built-in families' ``kind:`` names."""


def _positive_int(f: Fields, key: str, default=None) -> int:
    kwargs = {} if default is None else {"default": default}
    return int(f.number(key, integer=True, minimum=1, **kwargs))


def model_from_dict(data: object, origin: str = "<dict>") -> Model:
    """Validate a model description (parsed YAML or a dict) and build the typed model."""
    f = Fields(data, origin)
    kind = f.string("kind")
    if kind not in MODEL_KINDS:  # a family registered beside the built-in ones reads its own entries
        kinds = MODEL_KINDS + tuple(k for k in family_names() if k not in MODEL_KINDS)
        if kind not in kinds:
            raise f.error("kind", kind, f"one of {', '.join(kinds)}")
        model = get_family(kind).model_from_fields(f, common_fields(f))
        f.finish()
        return model
    common = common_fields(f)
    if kind == "transformer":
        if not f.has("head_dim") and not f.has("latent_attention") and f.has("hidden_size") and f.has("num_heads"):
            hidden, heads = _positive_int(f, "hidden_size"), _positive_int(f, "num_heads")
            if hidden % heads:
                raise f.error("num_heads", heads, f"a divisor of hidden_size={hidden} (or give head_dim)")
        model = TransformerModel(
            **common,
            vocab_size=_positive_int(f, "vocab_size"),
            hidden_size=_positive_int(f, "hidden_size"),
            num_layers=_positive_int(f, "num_layers"),
            num_heads=_positive_int(f, "num_heads"),
            num_kv_heads=_positive_int(f, "num_kv_heads"),
            ffn_hidden_size=_positive_int(f, "ffn_hidden_size"),
            ffn_activation=f.string("ffn_activation", ("swiglu", "gelu"), default="swiglu"),
            norm=f.string("norm", ("rmsnorm", "layernorm"), default="rmsnorm"),
            tied_embeddings=f.boolean("tied_embeddings", default=False),
            num_experts=_positive_int(f, "num_experts", 1),
            experts_per_token=_positive_int(f, "experts_per_token", 1),
            default_seq_len=_positive_int(f, "default_seq_len", 4096),
            head_dim=_positive_int(f, "head_dim", 0) if f.has("head_dim") else 0,
            **_block_variations(f),
            approximation=f.string("approximation") if f.has("approximation") else None,
        )
        _check_transformer(model, origin)
    elif kind == "dlrm":
        tables_raw = f.raw("tables")
        if not isinstance(tables_raw, dict):
            raise f.error("tables", tables_raw, "a mapping with rows: [..], dim: N and pooling: [..]")
        t = Fields(tables_raw, origin, "tables")
        rows, pooling = t.raw("rows"), t.raw("pooling")
        dim = _positive_int(t, "dim")
        if not (isinstance(rows, list) and rows and all(isinstance(r, int) and r > 0 for r in rows)):
            raise t.error("rows", rows, "a non-empty list of positive integers")
        if not (isinstance(pooling, list) and len(pooling) == len(rows) and all(isinstance(p, int) and p > 0 for p in pooling)):
            raise t.error("pooling", pooling, f"a list of {len(rows)} positive integers (one per table)")
        t.finish()
        model = DLRMModel(
            **common,
            num_dense_features=_positive_int(f, "num_dense_features"),
            tables=tuple(EmbeddingTable(r, dim, p) for r, p in zip(rows, pooling)),
            bottom_mlp=_widths(f, "bottom_mlp"),
            top_mlp=_widths(f, "top_mlp"),
            cross_layers=_positive_int(f, "cross_layers"),
            cross_low_rank=_positive_int(f, "cross_low_rank"),
            default_batch=_positive_int(f, "default_batch", 65536),
        )
    else:
        model = HSTUModel(
            **common,
            item_table_rows=_positive_int(f, "item_table_rows"),
            embedding_dim=_positive_int(f, "embedding_dim"),
            num_layers=_positive_int(f, "num_layers"),
            num_heads=_positive_int(f, "num_heads"),
            attention_dim=_positive_int(f, "attention_dim"),
            linear_dim=_positive_int(f, "linear_dim"),
            default_seq_len=_positive_int(f, "default_seq_len", 2048),
            default_batch=_positive_int(f, "default_batch", 64),
        )
    f.finish()
    return model


def common_fields(f: Fields) -> dict[str, str]:
    """The fields every model has: name (lower-cased), display_name, source."""
    return dict(name=f.string("name").lower(), display_name=f.string("display_name"), source=f.string("source"))


def _block_variations(f: Fields) -> dict:
    """The optional fields of a transformer whose blocks are not all Llama-style ones (``TransformerModel``): shared
    experts, dense layers of an MoE model, query/key norms, windowed layers, latent attention."""
    fields: dict = {}
    for key in ("shared_experts", "shared_expert_ffn_size", "dense_ffn_hidden_size", "attention_window"):
        if f.has(key):
            fields[key] = int(f.number(key, integer=True, minimum=0))
    for key in ("dense_layers", "windowed_layers"):
        if f.has(key):
            fields[key] = _layer_indices(f, key)
    if f.has("qk_norm"):
        fields["qk_norm"] = f.boolean("qk_norm")
    if f.has("window_kind"):
        fields["window_kind"] = f.string("window_kind", ("sliding", "chunked"))
    if f.has("latent_attention"):
        raw = f.raw("latent_attention")
        if not isinstance(raw, dict):
            raise f.error("latent_attention", raw, "a mapping with q_lora_rank, kv_lora_rank, qk_nope_head_dim, "
                                                   "qk_rope_head_dim and v_head_dim")
        m = Fields(raw, f.origin, "latent_attention")
        fields["latent_attention"] = LatentAttention(
            q_lora_rank=int(m.number("q_lora_rank", integer=True, minimum=0)),
            kv_lora_rank=_positive_int(m, "kv_lora_rank"), qk_nope_head_dim=_positive_int(m, "qk_nope_head_dim"),
            qk_rope_head_dim=_positive_int(m, "qk_rope_head_dim"), v_head_dim=_positive_int(m, "v_head_dim"))
        m.finish()
    return fields


def _layer_indices(f: Fields, key: str) -> tuple[int, ...]:
    value = f.raw(key)
    if not (isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
            and value == sorted(set(value))):
        raise f.error(key, value, "a list of layer indices (integers from 0), ascending, each once")
    return tuple(value)


def _widths(f: Fields, key: str) -> tuple[int, ...]:
    value = f.raw(key)
    if not (isinstance(value, list) and value and all(isinstance(v, int) and v > 0 for v in value)):
        raise f.error(key, value, "a non-empty list of positive layer widths")
    return tuple(value)


def _check_transformer(m: TransformerModel, origin: str) -> None:
    if m.num_heads % m.num_kv_heads:
        raise SpecError(origin, "num_kv_heads", m.num_kv_heads, f"a divisor of num_heads={m.num_heads}")
    if m.experts_per_token > m.num_experts:
        raise SpecError(origin, "experts_per_token", m.experts_per_token, f"at most num_experts={m.num_experts}")
    if not m.is_moe:
        for key in ("shared_experts", "dense_layers", "dense_ffn_hidden_size"):
            if getattr(m, key):
                raise SpecError(origin, key, getattr(m, key), f"no value for a dense model (num_experts=1): {key} "
                                "describes an MoE model's layers")
    for key in ("dense_layers", "windowed_layers"):
        layers = getattr(m, key)
        if layers and layers[-1] >= m.num_layers:
            raise SpecError(origin, key, list(layers), f"layer indices below num_layers={m.num_layers}")
    if bool(m.windowed_layers) != bool(m.attention_window):
        raise SpecError(origin, "attention_window" if m.windowed_layers else "windowed_layers",
                        m.attention_window if m.windowed_layers else list(m.windowed_layers),
                        "both attention_window (tokens) and windowed_layers (indices), or neither")
    if m.latent_attention is not None and m.num_kv_heads != m.num_heads:
        raise SpecError(origin, "num_kv_heads", m.num_kv_heads,
                        f"num_heads={m.num_heads}: latent attention gives every head its own key and value")


def load_model(spec: str | Path | dict, *, approximate_as: str | None = None) -> Model:
    """A model from a YAML file path, a Hugging Face config.json path, or a dict. ``approximate_as`` (config.json
    only): read an architecture the model does not implement as that family anyway (``from_hf_config``)."""
    path = None if isinstance(spec, dict) else Path(spec)
    if approximate_as is not None and (path is None or path.suffix != ".json"):
        raise SpecError(str(spec) if path else "<dict>", "approximate_as", approximate_as,
                        "no value: approximate_as applies to a Hugging Face config.json only")
    if path is None:
        return model_from_dict(spec)
    if path.suffix == ".json":
        return from_hf_config(path, approximate_as=approximate_as)
    return model_from_dict(load_yaml(path), str(path))


def from_hf_config(config: str | Path | dict, name: str | None = None, *,
                   approximate_as: str | None = None) -> TransformerModel:
    """A transformer from a Hugging Face ``config.json`` (a path or its parsed dict), read locally.

    Only families the model implements are read (``workbench.hf_config.HF_FAMILIES``: llama, mistral, qwen2,
    mixtral, gpt2); another ``model_type`` / ``architectures`` (deepseek_v3, bert, gpt_oss, llama4, qwen3_moe, t5,
    ...) is a ``SpecError`` naming it, unless ``approximate_as="llama"`` (or another supported family): then it is
    read as that family and ``approximation`` says what was left out, which predictions put in their notes.
    Typed fields are strict: JSON integers and booleans, ``hidden_act`` from the family's list.
    """
    from workbench.hf_config import read_hf_config

    return read_hf_config(config, name, approximate_as=approximate_as)


def _catalog_dir() -> Path:
    return specs_dir() / "models"


_MODELS: Catalog[Model] = Catalog(_catalog_dir, load_model)


def _catalog() -> dict[str, Model]:
    return _MODELS.entries()


def list_models() -> list[Model]:
    return list(_catalog().values())


def get_model(name: str | Model) -> Model:
    """A catalog model by exact name (case-insensitive), e.g. ``get_model("llama3-70b")``; a model (of a
    registered family) is returned as it is."""
    if isinstance(name, (TransformerModel, DLRMModel, HSTUModel)) or is_registered_model(name):
        return name
    model = _MODELS.get(str(name).lower())  # reads that model's file alone
    if model is None:
        raise UnknownNameError("model", name, _catalog())
    return model
