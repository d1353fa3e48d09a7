"""The model catalog: typed model descriptions loaded from ``specs/models/*.yaml``.

Three families: decoder-only transformers (dense or mixture-of-experts), DLRM (embedding tables + MLPs + a
DCNv2 interaction) and HSTU-style generative recommenders; what each trains as, and which parallelisms and stacks
apply to it, its family says (``workbench.families``; a family added there reads its own catalog entries). User
models come from a YAML/dict with the same schema, or from a Hugging Face ``config.json`` parsed locally
(``from_hf_config``, ``workbench.hf_config``; no network), for the architectures the transformer model implements.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal, Union

from workbench._data import specs_dir
from workbench.errors import SpecError, UnknownNameError
from workbench.families import family_names, get_family, is_registered_model
from workbench.schema import Fields, load_catalog, load_yaml


@dataclass(frozen=True)
class TransformerModel:
    """A decoder-only transformer (Llama/GPT/Mixtral family)."""

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
    """0 derives hidden_size / num_heads."""
    kind: Literal["transformer"] = "transformer"
    approximation: str | None = None
    """What this model leaves out of the architecture it was read from (``from_hf_config`` with
    ``approximate_as``, or a config it had to assume things about); every prediction repeats it in its notes."""

    def __post_init__(self):
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Parameters of one transformer block (attention + FFN/experts + norms)."""
        h = self.hidden_size
        attention = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        branches = 3 if self.ffn_activation == "swiglu" else 2  # gate+up+down vs up+down
        ffn = branches * h * self.ffn_hidden_size * self.num_experts
        router = h * self.num_experts if self.is_moe else 0
        norms = 2 * h * (2 if self.norm == "layernorm" else 1)
        return attention + ffn + router + norms

    def expert_params_per_layer(self) -> int:
        """Parameters of one layer's routed experts (0 for a dense model)."""
        if not self.is_moe:
            return 0
        branches = 3 if self.ffn_activation == "swiglu" else 2
        return branches * self.hidden_size * self.ffn_hidden_size * self.num_experts

    def params_per_gpu(self, tp: int, pp: int, dp: int, ep: int, sharded: bool) -> float:
        """Parameters one GPU holds (the busiest pipeline stage, embeddings included). Dense weights split
        tp x pp ways and, when ``sharded`` (FSDP), dp ways; routed experts split ep ways by expert parallelism
        and, under FSDP, over the rest of the dp group too, so dp ways in all."""
        layers = -(-self.num_layers // pp)
        experts = layers * self.expert_params_per_layer() / tp
        dense = layers * (self.layer_params() - self.expert_params_per_layer()) / tp + self.embedding_params() / tp
        return dense / (dp if sharded else 1) + experts / (dp if sharded else ep)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of a block, unsharded, by the names LoRA targets use (one
        expert's for an MoE FFN): q, k, v, o and gate, up, down (no gate in an ungated FFN)."""
        h, f = self.hidden_size, self.ffn_hidden_size
        shapes = {"q": (h, self.q_size), "k": (h, self.kv_size), "v": (h, self.kv_size), "o": (self.q_size, h)}
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
        """Parameters one token touches in a block (top-k experts only)."""
        branches = 3 if self.ffn_activation == "swiglu" else 2
        inactive = branches * self.hidden_size * self.ffn_hidden_size * (self.num_experts - self.experts_per_token)
        return self.layer_params() - inactive

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    @property
    def num_params(self) -> int:
        final_norm = self.hidden_size * (2 if self.norm == "layernorm" else 1)
        return self.num_layers * self.layer_params() + self.embedding_params() + final_norm

    @property
    def num_active_params(self) -> int:
        return self.num_params - self.num_layers * (self.layer_params() - self.active_layer_params())


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

    def layer_params(self) -> int:
        d = self.embedding_dim
        uvqk = d * self.num_heads * (2 * self.linear_dim + 2 * self.attention_dim)
        out = self.num_heads * self.linear_dim * d
        return uvqk + out + 2 * d

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
        if not f.has("head_dim") and f.has("hidden_size") and f.has("num_heads"):
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


@cache
def _catalog() -> dict[str, Model]:
    return load_catalog(_catalog_dir(), load_model)


def list_models() -> list[Model]:
    return list(_catalog().values())


def get_model(name: str | Model) -> Model:
    """A catalog model by exact name (case-insensitive), e.g. ``get_model("llama3-70b")``; a model (of a
    registered family) is returned as it is."""
    if isinstance(name, (TransformerModel, DLRMModel, HSTUModel)) or is_registered_model(name):
        return name
    catalog = _catalog()
    key = str(name).lower()
    if key not in catalog:
        raise UnknownNameError("model", name, catalog)
    return catalog[key]
