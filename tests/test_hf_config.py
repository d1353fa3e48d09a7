"""Hugging Face configs: the families the model implements parse as before; others only with approximate_as, which
every prediction then notes. The malformed cases are in tests/data/bad/hf/cases.yaml."""

import dataclasses
import json
from pathlib import Path

import pytest

from workbench.errors import SpecError
from workbench.hf_config import HF_FAMILIES
from workbench.models import TransformerModel, from_hf_config, get_model, load_model
from workbench.predict import predict
from workbench.recipe.build import revised_model

BAD = Path(__file__).parent / "data" / "bad" / "hf"
CONFIGS = Path(__file__).parent / "data" / "hf"  # configs of the families beyond Llama's (issue 17)

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "hidden_act": "silu", "max_position_embeddings": 8192, "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16",
}
MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
    "hidden_act": "silu", "max_position_embeddings": 32768, "sliding_window": 4096, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
}
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
    "hidden_act": "silu", "max_position_embeddings": 131072, "max_window_layers": 28, "sliding_window": 131072,
    "use_sliding_window": False, "tie_word_embeddings": False, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
    "num_local_experts": 8, "num_experts_per_tok": 2, "hidden_act": "silu", "max_position_embeddings": 32768,
    "sliding_window": None, "tie_word_embeddings": False, "rms_norm_eps": 1e-05, "router_aux_loss_coef": 0.02,
}
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 151936, "hidden_act": "silu", "max_position_embeddings": 40960, "max_window_layers": 36,
    "sliding_window": None, "use_sliding_window": False, "tie_word_embeddings": False, "attention_bias": False,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000,
}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
        "vocab_size": 50257, "n_positions": 1024, "n_inner": None, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-05}


def test_llama_config_is_the_catalog_model_exactly():
    model = from_hf_config(LLAMA3_8B)
    assert model.num_params == get_model("llama3-8b").num_params
    assert model.approximation is None and model.ffn_activation == "swiglu" and not model.tied_embeddings


def test_mixtral_config_is_the_catalog_model_exactly():
    model = from_hf_config(MIXTRAL_8X7B)
    assert model.is_moe and model.experts_per_token == 2 and model.approximation is None
    assert model.num_params == get_model("mixtral-8x7b").num_params


def test_qwen2_parses_and_its_unused_window_is_not_a_note():
    model = from_hf_config(QWEN2_7B)
    assert model.num_params / 1e9 == pytest.approx(7.62, rel=0.01)  # Qwen2-7B: 7.62 B (q/k/v biases aside)
    assert model.num_kv_heads == 4 and model.default_seq_len == 8192 and model.approximation is None
    small = from_hf_config({**QWEN2_7B, "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
                            "num_hidden_layers": 24, "num_key_value_heads": 2, "tie_word_embeddings": True})
    assert small.tied_embeddings and small.num_params / 1e9 == pytest.approx(0.494, rel=0.01)  # Qwen2-0.5B


def test_mistral_sliding_window_is_said_in_every_prediction():
    model = from_hf_config(MISTRAL_7B_V01)
    assert model.num_params / 1e9 == pytest.approx(7.24, rel=0.01)
    assert model.approximation.startswith("mistral config: sliding_window=4096 modelled as full causal attention")
    assert model.approximation in predict(model, "h200", seq_len=1024).notes
    assert from_hf_config({**MISTRAL_7B_V01, "sliding_window": None}).approximation is None  # v0.2+: no window


def test_gpt2_config_with_null_n_inner():
    model = from_hf_config(GPT2)
    assert model.ffn_hidden_size == 4 * 768 and model.norm == "layernorm" and model.tied_embeddings
    assert model.num_params == get_model("gpt2-small").num_params and model.approximation is None


def test_null_means_absent_where_hugging_face_writes_it():
    model = from_hf_config({**LLAMA3_8B, "num_key_value_heads": None, "head_dim": None})
    assert model.num_kv_heads == 32 and model.head_dim == 128


def test_every_supported_family_parses():
    files = {"qwen3_moe": "qwen3_moe_30b_a3b", "deepseek_v3": "deepseek_v3", "gpt_oss": "gpt_oss_20b",
             "llama4": "llama4_scout"}
    configs = {"llama": LLAMA3_8B, "mistral": MISTRAL_7B_V01, "qwen2": QWEN2_7B, "mixtral": MIXTRAL_8X7B, "gpt2": GPT2,
               "qwen3": QWEN3_8B, **{family: json.loads((CONFIGS / f"{f}.json").read_text()) for family, f in files.items()}}
    configs["llama4_text"] = {**configs["llama4"]["text_config"], "architectures": ["Llama4ForCausalLM"]}
    assert set(configs) == set(HF_FAMILIES)
    for family, config in configs.items():
        assert isinstance(from_hf_config(config), TransformerModel), family
        assert isinstance(from_hf_config({k: v for k, v in config.items() if k != "model_type"}), TransformerModel)


def test_a_config_naming_no_family_is_read_as_llama_and_says_so():
    bare = {k: v for k, v in LLAMA3_8B.items() if k not in ("architectures", "model_type")}
    model = from_hf_config(bare)
    assert model.num_params == get_model("llama3-8b").num_params
    assert model.approximation == "read as llama: the config names no model_type or architectures"


def test_deepseek_v3_read_as_llama_says_what_is_left_out():
    model = load_model(CONFIGS / "deepseek_v3.json", approximate_as="llama")
    assert model.head_dim == 56 and model.num_experts == 256 and model.experts_per_token == 8
    note = model.approximation
    assert note.startswith("approximated as llama: a deepseek_v3 config read as llama")
    assert "kv_lora_rank=512" in note and "n_shared_experts=1" in note and "first_k_dense_replace=3" in note
    assert "rope_theta" not in note  # cost-neutral keys are not listed
    notes = predict(model, "h200", gpus=64, seq_len=1024).notes
    assert note in notes
    assert revised_model(model, {"num_layers": 2}).approximation == note  # carried through recipes' revisions


def test_bert_approximated_names_the_encoder_and_the_activation():
    model = from_hf_config(BAD / "bert_base.json", approximate_as="llama")
    assert "bert differs and is not modelled: a bidirectional encoder" in model.approximation
    assert "hidden_act='gelu' modelled as swiglu" in model.approximation
    assert "LayerNorm modelled as RMSNorm" in model.approximation


def test_approximate_as_lists_every_unread_key_and_counts_the_rest():
    model = from_hf_config(CONFIGS / "gpt_oss_20b.json", approximate_as="llama")
    assert "sliding_window=128 modelled as full causal attention" in model.approximation
    assert "experts_per_token" not in model.approximation  # read, as the second spelling of num_experts_per_tok
    assert model.num_experts == 32 and model.experts_per_token == 4 and model.head_dim == 64


def test_approximate_as_accepts_an_activation_the_family_does_not_run_and_notes_it():
    with pytest.raises(SpecError, match="relu2"):
        from_hf_config({**LLAMA3_8B, "hidden_act": "relu2"})
    model = from_hf_config({**LLAMA3_8B, "hidden_act": "relu2"}, approximate_as="llama")
    assert model.ffn_activation == "swiglu"
    assert model.approximation == "approximated as llama: hidden_act='relu2' modelled as swiglu"
    assert from_hf_config(LLAMA3_8B, approximate_as="llama").approximation is None  # nothing approximated


def test_approximate_as_still_reads_types_strictly():
    with pytest.raises(SpecError, match="tie_word_embeddings = 'false'"):
        from_hf_config({**LLAMA3_8B, "model_type": "qwen3", "tie_word_embeddings": "false"}, approximate_as="llama")


@pytest.mark.parametrize("change, field, expected", [
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings", "true or false"),
    ({"tie_word_embeddings": None}, "tie_word_embeddings", "true or false"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers", "not a string"),
    ({"vocab_size": 0}, "vocab_size", "an integer >= 1"),
    ({"hidden_act": "gelu"}, "hidden_act", "silu, swish"),  # a gated llama MLP with GELU is GeGLU, not modelled
    ({"hidden_act": 7}, "hidden_act", "a non-empty string"),
    ({"model_type": "falcon"}, "model_type", "a family the model implements"),
    ({"architectures": ["Qwen2ForCausalLM"]}, "architectures", "classes of model_type 'llama'"),
])
def test_typed_fields_are_strict(change, field, expected):
    with pytest.raises(SpecError) as info:
        from_hf_config({**LLAMA3_8B, **change})
    assert info.value.field == field and expected in info.value.expected, str(info.value)


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA3_8B, "num_local_experts": "8", "num_experts_per_tok": 2}))
    with pytest.raises(SpecError) as info:
        load_model(path)
    assert str(info.value).startswith(f"{path}: num_local_experts = '8': expected an integer")


def test_cli_predict_prints_the_approximation(capsys):
    from workbench.cli import main

    assert main(["predict", "--model", str(CONFIGS / "deepseek_v3.json"), "--approximate-as", "llama", "--gpu", "h200",
                 "--gpus", "64", "--seq-len", "1024", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("approximated as llama: a deepseek_v3 config read as llama") for n in notes)


def test_approximation_is_part_of_the_model():
    model = from_hf_config(LLAMA3_8B)
    assert dataclasses.replace(model, approximation="x") != model
