import json

import pytest

from workbench.errors import SpecError, UnknownNameError
from workbench.models import DLRMModel, TransformerModel, from_hf_config, get_model, list_models, load_model

LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "hidden_act": "silu", "max_position_embeddings": 8192, "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
}


@pytest.mark.parametrize("name,billions", [("llama3-8b", 8.03), ("llama3-70b", 70.55), ("llama3-405b", 405.85),
                                           ("mixtral-8x7b", 46.70), ("gpt2-small", 0.124)])
def test_parameter_counts_match_published_sizes(name, billions):
    assert get_model(name).num_params / 1e9 == pytest.approx(billions, rel=0.01)


def test_moe_active_parameters():
    mixtral = get_model("mixtral-8x7b")
    assert mixtral.num_active_params / 1e9 == pytest.approx(12.9, rel=0.02)  # "13B active" per Mistral


def test_dlrm_matches_mlperf_config():
    dlrm = get_model("dlrm-dcnv2")
    assert isinstance(dlrm, DLRMModel)
    assert len(dlrm.tables) == 26 and dlrm.embedding_dim == 128
    assert dlrm.interaction_width == 128 + 26 * 128
    assert dlrm.embedding_params == sum(t.rows for t in dlrm.tables) * 128


def test_catalog_names_and_errors():
    assert {m.name for m in list_models()} >= {"llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b",
                                              "gpt2-small", "dlrm-dcnv2", "hstu-gr"}
    with pytest.raises(UnknownNameError, match="llama3-70b"):
        get_model("llama-70b")


def test_hf_config_parses_locally(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA3_8B_CONFIG))
    model = load_model(path)
    assert isinstance(model, TransformerModel)
    assert model.num_params == get_model("llama3-8b").num_params
    assert model.num_kv_heads == 8 and model.head_dim == 128


def test_hf_mixtral_and_gpt2_configs():
    mixtral = from_hf_config({**LLAMA3_8B_CONFIG, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000},
                             name="moe")
    assert mixtral.is_moe and mixtral.experts_per_token == 2
    gpt2 = from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
                           "n_positions": 1024, "activation_function": "gelu_new"})
    assert gpt2.ffn_activation == "gelu" and gpt2.norm == "layernorm" and gpt2.tied_embeddings
    assert gpt2.num_params == get_model("gpt2-small").num_params


def test_hf_config_missing_key_names_it():
    broken = dict(LLAMA3_8B_CONFIG)
    del broken["num_hidden_layers"]
    with pytest.raises(SpecError, match="num_hidden_layers"):
        from_hf_config(broken)


def test_unreadable_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="config.json"):
        load_model(path)


@pytest.mark.parametrize("change,field", [
    ({"num_heads": 5}, "num_heads"),            # does not divide hidden 64
    ({"num_kv_heads": 3}, "num_kv_heads"),      # does not divide heads 4
    ({"hidden_size": 0}, "hidden_size"),
    ({"hiden_size": 64}, "hiden_size"),         # typo: unknown field
    ({"ffn_activation": "relu6"}, "ffn_activation"),
])
def test_invalid_transformer_description(change, field):
    spec = dict(kind="transformer", name="t", display_name="t", source="test", vocab_size=100, hidden_size=64,
                num_layers=2, num_heads=4, num_kv_heads=2, ffn_hidden_size=128)
    spec.update(change)
    with pytest.raises(SpecError, match=field):
        load_model(spec)
