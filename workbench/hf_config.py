"""Hugging Face ``config.json`` -> ``TransformerModel``, only for architectures the model implements.

``TransformerModel`` is a decoder-only transformer: causal attention with GQA (``num_kv_heads``), an FFN that is
either a gated SwiGLU MLP (gate, up, down) or an ungated GELU MLP (up, down), dense or top-k mixture-of-experts
over identical experts, RMSNorm or LayerNorm, tied or untied embeddings. The Hugging Face families that are exactly
that (``HF_FAMILIES``) are read as they are; anything else -- DeepSeek's latent attention and shared experts, an
encoder like BERT, gpt-oss's sliding-window layers, Llama 4, Qwen3-MoE, T5 -- is a ``SpecError`` naming the
architecture, unless the caller asks for ``approximate_as="llama"`` (CLI ``--approximate-as llama``): then it is
read as that family anyway and ``TransformerModel.approximation`` says what was left out, which every prediction
repeats in its notes.

Typed fields are read strictly, as ``transformers`` would have written them: integers are JSON integers (not
``"8"``, ``"8k"`` or ``8.0``), booleans are JSON booleans (``"false"`` is an error, not truthy), ``null`` only where
Hugging Face means "absent" (``num_key_value_heads``, ``head_dim``, ``n_inner``, ``sliding_window``,
``moe_intermediate_size``), and ``hidden_act`` one of the activations the family's MLP runs as the model prices it.
Not modelled in the supported families, all under 0.1% of parameters or FLOPs: Qwen2's q/k/v biases, GPT-2's
learned position embeddings and biases.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
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


_GATED = {"silu": "swiglu", "swish": "swiglu"}
"""LlamaMLP-style families apply ``hidden_act`` to the gate of gate * up: silu is SwiGLU, the model's swiglu."""
_GELU = {"gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu"}
"""GPT-2's MLP is ungated (up, act, down): any GELU variant is the model's gelu (same FLOPs, same weights)."""

HF_FAMILIES: dict[str, HFFamily] = {f.name: f for f in (
    HFFamily("llama", ("LlamaForCausalLM",), _GATED, "silu", "rmsnorm", False),
    HFFamily("mistral", ("MistralForCausalLM",), _GATED, "silu", "rmsnorm", False),
    HFFamily("qwen2", ("Qwen2ForCausalLM",), _GATED, "silu", "rmsnorm", False),
    HFFamily("mixtral", ("MixtralForCausalLM",), _GATED, "silu", "rmsnorm", False),
    HFFamily("gpt2", ("GPT2LMHeadModel",), _GELU, "gelu_new", "layernorm", True, ffn_multiple=4),
)}
_FAMILY_OF_ARCHITECTURE = {arch: f.name for f in HF_FAMILIES.values() for arch in f.architectures}

_UNSUPPORTED: dict[str, str] = {
    "deepseek_v2": "multi-head latent attention (low-rank q/kv, separate rope/nope/value head dims), shared experts "
                   "and dense first layers",
    "deepseek_v3": "multi-head latent attention (low-rank q/kv, separate rope/nope/value head dims), shared experts, "
                   "dense first layers and a multi-token-prediction module",
    "bert": "a bidirectional encoder (no causal mask) with a masked-LM head, not a causal decoder",
    "roberta": "a bidirectional encoder (no causal mask) with a masked-LM head, not a causal decoder",
    "distilbert": "a bidirectional encoder (no causal mask) with a masked-LM head, not a causal decoder",
    "t5": "an encoder-decoder with cross-attention, not a decoder-only model",
    "bart": "an encoder-decoder with cross-attention, not a decoder-only model",
    "gpt_oss": "alternating sliding-window and full attention layers, attention sinks and biases",
    "llama4": "interleaved dense and MoE layers with a shared expert, chunked attention and a vision encoder",
    "qwen2_moe": "a shared expert beside the routed ones",
    "qwen3_moe": "per-head query/key RMSNorm and MoE layer placement (decoder_sparse_step, mlp_only_layers)",
    "qwen3": "per-head query/key RMSNorm",
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

_NULLABLE = frozenset({"num_key_value_heads", "head_dim", "n_inner", "sliding_window", "moe_intermediate_size"})
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

    def unread(self) -> list[str]:
        return [k for k in self.config if k not in self.read and k not in _HARMLESS]


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
    if "sliding_window" in config:
        window = r.integer("sliding_window", default=0)
        active = config.get("use_sliding_window", True)  # Qwen2 carries a window it does not use
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
