"""Hugging Face ``config.json`` -> ``TransformerModel``, only for architectures the model implements.

``TransformerModel`` is a decoder-only transformer: causal attention with GQA (``num_kv_heads``) or multi-head
latent attention, an FFN that is either a gated SwiGLU MLP (gate, up, down) or an ungated GELU MLP (up, down),
dense or top-k mixture-of-experts over identical experts (with shared experts, and dense layers among the MoE ones),
full or windowed (sliding / chunked) attention per layer, optional per-head q/k norms, RMSNorm or LayerNorm, tied
or untied embeddings. The Hugging Face families that are that (``HF_FAMILIES``) are read as they are: llama,
mistral, qwen2, mixtral, gpt2 with Llama-style blocks, and qwen3, qwen3_moe, deepseek_v3, gpt_oss, llama4 (its
``text_config``) and llama4_text, whose ``HFFamily.blocks`` reader takes their layer placement, windows, norms and
latent attention from the config as ``transformers`` derives them; what such a reader leaves out (DeepSeek-V3's
multi-token-prediction module, GPT-OSS's attention sinks and biases, Llama 4's vision encoder) is said in
``TransformerModel.approximation``. Anything else -- an encoder like BERT, T5, Gemma -- is a ``SpecError`` naming
the architecture, unless the caller asks for ``approximate_as="llama"`` (CLI ``--approximate-as llama``): then it is
read as that family anyway and ``TransformerModel.approximation`` says what was left out, which every prediction
repeats in its notes.

Typed fields are read strictly, as ``transformers`` would have written them: integers are JSON integers (not
``"8"``, ``"8k"`` or ``8.0``), booleans are JSON booleans (``"false"`` is an error, not truthy), ``null`` only where
Hugging Face means "absent" (``num_key_value_heads``, ``head_dim``, ``n_inner``, ``sliding_window``,
``moe_intermediate_size``, ``q_lora_rank``, ``layer_types``, ...: ``_NULLABLE``), and ``hidden_act`` one of the activations the family's MLP runs as the model prices it.
Not modelled in the supported families, all under 0.1% of parameters or FLOPs: Qwen2's q/k/v biases, GPT-2's
learned position embeddings and biases.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from workbench.errors import MISSING, SpecError, excerpt


@dataclass(frozen=True)
class HFFamily:
    """A Hugging Face model family ``TransformerModel`` represents exactly."""

    name: str
    """``model_type`` in ``config.json``."""
    architectures: tuple[str, ...]
    """``architectures`` classes of the family (a causal LM head: what training prices)."""
    activations: dict[str, str]
    """``hidden_act`` -> ``TransformerModel.ffn_activation`` (how the family's MLP uses it)."""
    default_activation: str
    """``hidden_act`` when the config has none (the ``transformers`` config class default)."""
    norm: str
    tied_default: bool
    """``tie_word_embeddings`` when absent (the config class default)."""
    ffn_multiple: int = 0
    """GPT-2: the FFN is ``ffn_multiple`` x hidden when ``n_inner`` is absent or null; 0: required."""
    blocks: Callable[[_Reader, int], tuple[dict, list[str]]] | None = None
    """Reads what tells the family's blocks apart from Llama's (``TransformerModel``'s shared experts, dense
    layers, q/k norm, windows, latent attention) from the config, given its layer count: (model fields, notes of
    what is approximated). None: Llama-style blocks."""


_GATED = {"silu": "swiglu", "swish": "swiglu"}
"""LlamaMLP-style families apply ``hidden_act`` to the gate of gate * up: silu is SwiGLU, the model's swiglu."""
_GELU = {"gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu"}
"""GPT-2's MLP is ungated (up, act, down): any GELU variant is the model's gelu (same FLOPs, same weights)."""

_UNSUPPORTED: dict[str, str] = {
    "deepseek_v2": "multi-head latent attention (low-rank q/kv, separate rope/nope/value head dims), shared experts "
                   "and dense first layers",
    "bert": "a bidirectional encoder (no causal mask) with a masked-LM head, not a causal decoder",
    "roberta": "a bidirectional encoder (no causal mask) with a masked-LM head, not a causal decoder",
    "distilbert": "a bidirectional encoder (no causal mask) with a masked-LM head, not a causal decoder",
    "t5": "an encoder-decoder with cross-attention, not a decoder-only model",
    "bart": "an encoder-decoder with cross-attention, not a decoder-only model",
    "qwen2_moe": "a shared expert beside the routed ones",
    "gemma": "a GeGLU MLP and scaled embeddings",
    "gemma2": "a GeGLU MLP, alternating sliding-window layers and logit soft-capping",
    "gemma3": "a GeGLU MLP, sliding-window layers and per-head query/key norms",
    "phi3": "fused qkv and gate/up projections and (some sizes) sliding-window attention",
}
"""What the analytical model would miss for architectures people often try (the error and the note say it)."""

_HARMLESS = frozenset({
    "_name_or_path", "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "bos_token_id",
    "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
    "rope_theta", "rope_scaling", "attention_dropout", "hidden_dropout", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "use_cache", "pretraining_tp",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "aux_loss_alpha", "seq_aux", "n_group",
    "topk_group", "topk_method", "scoring_func", "norm_topk_prob", "routed_scaling_factor", "ep_size",
    "swiglu_limit", "auto_map", "task_specific_params", "id2label", "label2id", "max_window_layers",
    "use_sliding_window", "scale_attn_weights", "reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx",
    "initial_context_length", "gradient_checkpointing", "position_embedding_type",
})
"""Keys that do not change a training step's FLOPs, bytes or parameters (ids, epsilons, dropout, RoPE, routing
details): never listed as "not read" in an approximation note."""

_NULLABLE = frozenset({"num_key_value_heads", "head_dim", "n_inner", "sliding_window", "moe_intermediate_size",
                       "q_lora_rank", "attention_chunk_size", "moe_layers", "no_rope_layers", "layer_types",
                       "mlp_only_layers"})
"""Keys where ``null`` is what ``transformers`` writes for "absent, use the default"."""

MAX_DEFAULT_SEQ_LEN = 8192
"""The model's default sequence length is the config's context, capped here (long-context configs say 128k)."""


def supported_families() -> str:
    return ", ".join(HF_FAMILIES)


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", float: "a fraction", list: "a list", dict: "an object"}.get(type(value), "null")


class _Reader:
    """Typed access to one config dict; remembers which keys it read (the rest is listed when approximating)."""

    def __init__(self, config: dict, origin: str):
        self.config, self.origin = config, origin
        self.read: set[str] = set()

    def find(self, keys: tuple[str, ...]) -> str | None:
        return next((k for k in keys if k in self.config), None)

    def error(self, key: str, value: object, expected: str) -> SpecError:
        return SpecError(self.origin, key, value, expected)

    def integer(self, *keys: str, default: Any = None, minimum: int = 1, what: str = "") -> int | None:
        """The first of ``keys`` present, as a JSON integer >= ``minimum``; ``default`` when absent (or null where
        null means absent); a missing required key names every spelling."""
        key = self.find(keys)
        if key is None:
            if default is None:
                raise self.error(" or ".join(keys), MISSING, f"a value (needed to build the model{what})")
            return default
        self.read.update(k for k in keys if k in self.config)  # every spelling present counts as read
        value = self.config[key]
        if value is None and key in _NULLABLE:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, value, f"an integer >= {minimum} (a JSON number, not {_json_kind(value)})")
        if value < minimum:
            raise self.error(key, value, f"an integer >= {minimum}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        if key not in self.config:
            return default
        self.read.add(key)
        value = self.config[key]
        if not isinstance(value, bool):
            raise self.error(key, value, "true or false (a JSON boolean; the string \"false\" is not false)")
        return value

    def string(self, *keys: str, default: str) -> tuple[str, str]:
        """(key found or the first spelling, value)."""
        key = self.find(keys)
        if key is None:
            return keys[0], default
        self.read.add(key)
        value = self.config[key]
        if not isinstance(value, str) or not value:
            raise self.error(key, value, "a non-empty string")
        return key, value

    def integer_list(self, key: str, minimum: int = 0) -> list[int] | None:
        """A list of JSON integers >= ``minimum`` (layer indices, flags); None when absent or null."""
        if self.config.get(key) is None:
            self.read.add(key)
            return None
        self.read.add(key)
        value = self.config[key]
        if not (isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum
                                                for v in value)):
            raise self.error(key, value, f"a list of integers >= {minimum}")
        return value

    def layer_types(self, layers: int, default: list[str]) -> list[str]:
        """``layer_types`` (one attention name per layer, as transformers writes them), else ``default``."""
        self.read.add("layer_types")
        value = self.config.get("layer_types")
        if value is None:
            return default
        names = ("full_attention", "sliding_attention", "chunked_attention")
        if not (isinstance(value, list) and len(value) >= layers and all(v in names for v in value)):
            raise self.error("layer_types", excerpt(value, 60), f"a list of {layers} of {', '.join(names)}")
        return value[:layers]

    def unread(self) -> list[str]:
        return [k for k in self.config if k not in self.read and k not in _HARMLESS]


def _windows(window: int, types: list[str], kind: str) -> dict:
    """The windowed layers of ``layer_types`` (Hugging Face's per-layer attention names) as model fields."""
    windowed = [i for i, t in enumerate(types) if t in ("sliding_attention", "chunked_attention")]
    return {"attention_window": window, "window_kind": kind, "windowed_layers": windowed} if window and windowed else {}


def _qwen_windows(r: _Reader, layers: int) -> dict:
    """Qwen3's sliding-window layers: only with ``use_sliding_window``, from ``max_window_layers`` on
    (``Qwen3Config.layer_types``' default) unless ``layer_types`` names them."""
    window = r.integer("sliding_window", default=0)
    if not r.boolean("use_sliding_window", False) or not window:
        return {}
    first = r.integer("max_window_layers", default=0, minimum=0)
    default = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    return _windows(window, r.layer_types(layers, default), "sliding")


def _qwen3_blocks(r: _Reader, layers: int) -> tuple[dict, list[str]]:
    """Qwen3 (dense): per-head q/k RMSNorm (``Qwen3Attention.q_norm``, ``k_norm``)."""
    return {"qk_norm": True, **_qwen_windows(r, layers)}, []


def _qwen3_moe_blocks(r: _Reader, layers: int) -> tuple[dict, list[str]]:
    """Qwen3-MoE: q/k RMSNorm; a layer is MoE unless it is in ``mlp_only_layers`` or off the ``decoder_sparse_step``
    (``Qwen3MoeDecoderLayer``: MoE when (i + 1) % step == 0); its dense layers run ``intermediate_size``."""
    step = r.integer("decoder_sparse_step", default=1)
    only = set(r.integer_list("mlp_only_layers") or ())
    dense = [i for i in range(layers) if i in only or (i + 1) % step]
    fields = {"qk_norm": True, **_qwen_windows(r, layers)}
    if dense:
        fields.update(dense_layers=dense, dense_ffn_hidden_size=r.integer("intermediate_size"))
    return fields, []


def _deepseek_v3_blocks(r: _Reader, layers: int) -> tuple[dict, list[str]]:
    """DeepSeek-V3: latent attention, ``n_shared_experts`` of ``moe_intermediate_size``, dense layers before
    ``first_k_dense_replace`` and off ``moe_layer_freq`` (DeepSeek's ``DeepseekV3DecoderLayer``) running
    ``intermediate_size``; the multi-token-prediction module is left out (and said)."""
    r.read.add("head_dim")  # transformers writes qk_rope_head_dim there; the head's widths are the latent ones
    mla = {"q_lora_rank": r.integer("q_lora_rank", default=0, minimum=0),
           "kv_lora_rank": r.integer("kv_lora_rank"), "qk_nope_head_dim": r.integer("qk_nope_head_dim"),
           "qk_rope_head_dim": r.integer("qk_rope_head_dim"), "v_head_dim": r.integer("v_head_dim")}
    fields: dict = {"latent_attention": mla, "head_dim": mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]}
    shared = r.integer("n_shared_experts", default=0, minimum=0)
    if shared:
        fields["shared_experts"] = shared
    first = r.integer("first_k_dense_replace", default=0, minimum=0)
    freq = r.integer("moe_layer_freq", default=1)
    dense = [i for i in range(layers) if i < first or i % freq]
    if dense:
        fields.update(dense_layers=dense, dense_ffn_hidden_size=r.integer("intermediate_size"))
    mtp = r.integer("num_nextn_predict_layers", default=0, minimum=0)
    notes = [f"num_nextn_predict_layers={mtp}: the multi-token-prediction module is left out"] if mtp else []
    return fields, notes


def _gpt_oss_blocks(r: _Reader, layers: int) -> tuple[dict, list[str]]:
    """GPT-OSS: ``sliding_window`` on the ``layer_types`` that say sliding_attention (by default the even layers,
    ``GptOssConfig``); attention sinks, biases and the clamped SwiGLU are not modelled (and said)."""
    default = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    fields = _windows(r.integer("sliding_window", default=0), r.layer_types(layers, default), "sliding")
    r.boolean("attention_bias", False)
    return fields, ["attention sinks, q/k/v/o and expert biases and the clamped SwiGLU are not modelled (under 0.1% "
                    "of parameters and FLOPs)"]


def _llama4_blocks(r: _Reader, layers: int) -> tuple[dict, list[str]]:
    """Llama 4 (its ``text_config``): a shared expert beside the routed ones, MoE on ``moe_layers`` (by default
    every ``interleave_moe_layer_step``-th) and dense ``intermediate_size_mlp`` FFNs elsewhere, chunked attention
    of ``attention_chunk_size`` on the RoPE layers (``no_rope_layers``; by default all but every
    ``no_rope_layer_interval``-th), as ``Llama4TextConfig`` derives them."""
    fields: dict = {"qk_norm": r.boolean("use_qk_norm", True)}
    if r.integer("num_local_experts", default=1) > 1:
        step = r.integer("interleave_moe_layer_step", default=1)
        moe = r.integer_list("moe_layers")
        moe = set(range(step - 1, layers, step)) if moe is None else set(moe)
        dense = [i for i in range(layers) if i not in moe]
        fields["shared_experts"] = 1
        if dense:
            fields.update(dense_layers=dense, dense_ffn_hidden_size=r.integer("intermediate_size_mlp"))
    interval = r.integer("no_rope_layer_interval", default=4)
    rope = r.integer_list("no_rope_layers", minimum=0) or [int((i + 1) % interval != 0) for i in range(layers)]
    default = ["chunked_attention" if uses_rope else "full_attention" for uses_rope in rope[:layers]]
    fields.update(_windows(r.integer("attention_chunk_size", default=0), r.layer_types(layers, default), "chunked"))
    notes = ["text only: the vision encoder and projector are left out"]
    if fields["qk_norm"]:
        notes.append("the weightless L2 query/key norm of the RoPE layers is priced on every layer")
    return fields, notes


HF_FAMILIES: dict[str, HFFamily] = {f.name: f for f in (
    HFFamily("llama", ("LlamaForCausalLM",), _GATED, "silu", "rmsnorm", False),
    HFFamily("mistral", ("MistralForCausalLM",), _GATED, "silu", "rmsnorm", False),
    HFFamily("qwen2", ("Qwen2ForCausalLM",), _GATED, "silu", "rmsnorm", False),
    HFFamily("mixtral", ("MixtralForCausalLM",), _GATED, "silu", "rmsnorm", False),
    HFFamily("gpt2", ("GPT2LMHeadModel",), _GELU, "gelu_new", "layernorm", True, ffn_multiple=4),
    HFFamily("qwen3", ("Qwen3ForCausalLM",), _GATED, "silu", "rmsnorm", False, blocks=_qwen3_blocks),
    HFFamily("qwen3_moe", ("Qwen3MoeForCausalLM",), _GATED, "silu", "rmsnorm", False, blocks=_qwen3_moe_blocks),
    HFFamily("deepseek_v3", ("DeepseekV3ForCausalLM",), _GATED, "silu", "rmsnorm", False, blocks=_deepseek_v3_blocks),
    HFFamily("gpt_oss", ("GptOssForCausalLM",), _GATED, "silu", "rmsnorm", False, blocks=_gpt_oss_blocks),
    HFFamily("llama4", ("Llama4ForConditionalGeneration",), _GATED, "silu", "rmsnorm", False, blocks=_llama4_blocks),
    HFFamily("llama4_text", ("Llama4ForCausalLM",), _GATED, "silu", "rmsnorm", False, blocks=_llama4_blocks),
)}
_FAMILY_OF_ARCHITECTURE = {arch: f.name for f in HF_FAMILIES.values() for arch in f.architectures}


def _family_of(r: _Reader, approximate_as: str | None) -> tuple[HFFamily, str | None, str]:
    """(the family to read the config as, the config's own architecture, how it was decided: ``native``,
    ``inferred`` from the keys of a config that names none, or ``approximate`` as the caller asked)."""
    config = r.config
    model_type = config.get("model_type")
    if "model_type" in config and (not isinstance(model_type, str) or not model_type):
        raise r.error("model_type", model_type, "a non-empty string naming the architecture, e.g. \"llama\"")
    architectures = config.get("architectures")
    if architectures is not None and not (isinstance(architectures, list)
                                          and all(isinstance(a, str) for a in architectures)):
        raise r.error("architectures", architectures, "a list of class names, e.g. [\"LlamaForCausalLM\"]")
    architectures = architectures or []
    own = model_type or (_FAMILY_OF_ARCHITECTURE.get(architectures[0], architectures[0]) if architectures else None)

    if approximate_as is not None:
        if approximate_as not in HF_FAMILIES:
            raise SpecError("approximate_as", "approximate_as", approximate_as,
                            f"a supported family to read the config as: {supported_families()}")
        return HF_FAMILIES[approximate_as], own, "approximate"

    hint = ("; to model it as a Llama-style decoder anyway, pass approximate_as=\"llama\" (CLI: --approximate-as "
            "llama): the predictions' notes then say what is left out")
    shown = f" ({', '.join(architectures[:3])})" if architectures else ""
    if model_type is not None and model_type not in HF_FAMILIES:
        what = f"differs: {_UNSUPPORTED[model_type]}" if model_type in _UNSUPPORTED else "is not one of them"
        raise r.error("model_type", model_type,
                      f"a family the model implements ({supported_families()}); {model_type}{shown} {what}{hint}")
    for arch in architectures:
        family = _FAMILY_OF_ARCHITECTURE.get(arch)
        if family is None:
            known = ", ".join(a for f in HF_FAMILIES.values() for a in f.architectures)
            raise r.error("architectures", architectures,
                          f"a causal-LM class of a family the model implements ({known}); {arch} is not one{hint}")
        if model_type is not None and family != model_type:
            raise r.error("architectures", architectures,
                          f"classes of model_type {model_type!r} ({', '.join(HF_FAMILIES[model_type].architectures)})")
    if own is not None:
        return HF_FAMILIES[own], own, "native"
    # Neither named (a hand-written config): the keys decide, and the note says so.
    return HF_FAMILIES["gpt2" if "n_embd" in config else "llama"], None, "inferred"


def read_hf_config(config: str | Path | dict, name: str | None = None, *,
                   approximate_as: str | None = None) -> Any:
    """``workbench.models.from_hf_config``: see this module's docstring."""
    from workbench.models import model_from_dict

    origin = "<dict>"
    if isinstance(config, (str, Path)):
        from workbench.fileio import load_json

        origin = str(config)
        config = load_json(config, what="Hugging Face config.json")
    if not isinstance(config, dict):
        raise SpecError(origin, "<top>", config, "a JSON object (the config.json of one model)")
    r = _Reader(config, origin)
    family, own, mode = _family_of(r, approximate_as)
    if own == "llama4" and isinstance(config.get("text_config"), dict):  # a multimodal model: its text decoder
        r = _Reader(config["text_config"], f"{origin} text_config")
    lenient = mode == "approximate"
    left_out: list[str] = []

    hidden = r.integer("hidden_size", "n_embd", "d_model")
    heads = r.integer("num_attention_heads", "n_head", "num_heads")
    layers = r.integer("num_hidden_layers", "n_layer", "num_layers")
    kv_heads = r.integer("num_key_value_heads", default=heads)
    vocab = r.integer("vocab_size")
    experts = r.integer("num_local_experts", "n_routed_experts", "num_experts", default=1)
    top_k = r.integer("num_experts_per_tok", "experts_per_token", "num_experts_per_token",
                      default=None if experts > 1 else 1, what=f" with {experts} experts")
    if experts > 1:
        r.read.add("intermediate_size")  # MoE configs' dense width is replaced by the experts' (when given)
        ffn = r.integer("moe_intermediate_size", default=0) or r.integer("intermediate_size")
    elif family.ffn_multiple:
        ffn = r.integer("n_inner", "intermediate_size", default=0) or family.ffn_multiple * hidden
    else:
        ffn = r.integer("intermediate_size", "n_inner", "d_ff", "ffn_dim")
    head_dim = r.integer("head_dim", default=0)
    context = r.integer("max_position_embeddings", "n_positions", "n_ctx", default=4096)
    tied = r.boolean("tie_word_embeddings", family.tied_default)

    act_key, act = r.string("hidden_act", "activation_function", "hidden_activation", default=family.default_activation)
    activation = family.activations.get(act)
    if activation is None:
        modelled = next(iter(family.activations.values()))
        if not lenient:
            raise r.error(act_key, act, f"an activation the {family.name} family's MLP runs as the model prices it: "
                                        f"{', '.join(family.activations)} ({modelled}); {act!r} is not implemented "
                                        f"(approximate_as=\"{family.name}\", CLI --approximate-as {family.name}, "
                                        f"models it as {modelled} and says so)")
        activation = modelled
        left_out.append(f"{act_key}={act!r} modelled as {modelled}")

    if lenient and family.norm == "rmsnorm" and r.find(("layer_norm_eps", "layer_norm_epsilon")):
        left_out.append("LayerNorm modelled as RMSNorm")
    blocks: dict = {}
    if family.blocks is not None:  # the family reads its own windows, layer placement, norms, latent attention
        blocks, notes = family.blocks(r, layers)
        left_out += notes
    elif "sliding_window" in r.config:
        window = r.integer("sliding_window", default=0)
        active = r.config.get("use_sliding_window", True)  # Qwen2 carries a window it does not use
        if window and active is not False:
            left_out.append(f"sliding_window={window} modelled as full causal attention (attention FLOPs "
                            f"overcounted beyond {window} tokens)")

    model_name = name or str(config.get("_name_or_path") or config.get("model_type") or "hf-model")
    model_name = model_name.rstrip("/").split("/")[-1].lower() or "hf-model"
    data = {
        "kind": "transformer",
        "name": model_name,
        "display_name": f"{model_name} (from config.json)",
        "source": f"Hugging Face config {origin}",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "ffn_hidden_size": ffn,
        "ffn_activation": activation,
        "norm": family.norm,
        "tied_embeddings": tied,
        "num_experts": experts,
        "experts_per_token": top_k,
        "default_seq_len": min(context, MAX_DEFAULT_SEQ_LEN),
    }
    if head_dim:
        data["head_dim"] = head_dim
    data.update(blocks)
    model = model_from_dict(data, origin)
    note = _approximation_note(r, family, own, mode, left_out)
    return dataclasses.replace(model, approximation=note) if note else model


def _approximation_note(r: _Reader, family: HFFamily, own: str | None, mode: str, left_out: list[str]) -> str | None:
    """What every prediction must say about this reading (``TransformerModel.approximation``); None when the model
    represents the config exactly."""
    parts = []
    if mode == "inferred" or (mode == "approximate" and own is None):
        parts.append("the config names no model_type or architectures")
    elif mode == "approximate" and own != family.name:
        if own in HF_FAMILIES:
            parts.append(f"a {own} config read as {family.name}")
        else:
            what = _UNSUPPORTED.get(own, "an architecture the analytical model does not implement")
            parts.append(f"{own} differs and is not modelled: {what}")
    parts += left_out
    if mode != "native":  # everything the reader did not use, so the reader of the note can judge
        unread = r.unread()
        if unread:
            shown = ", ".join(f"{k}={excerpt(r.config[k], 24)}" for k in unread[:8])
            parts.append(f"config keys not read: {shown}{f' and {len(unread) - 8} more' if len(unread) > 8 else ''}")
    if not parts:
        return None
    head = {"approximate": f"approximated as {family.name}", "inferred": f"read as {family.name}",
            "native": f"{family.name} config"}[mode]
    return f"{head}: {'; '.join(parts)}"
