"""torchtitan's trainer with the cut flavors these benchmarks run: `torchrun ... torchtitan_entry.py --job.config_file F`.

torchtitan has no config key for the layer count or a 1B Llama 3; a flavor is a `TransformerModelArgs` in
`torchtitan.models.llama3.llama3_args`, so this adds three before the trainer starts (torchtitan 0.2.2):
- `8B_4L`: Llama 3 8B (torchtitan's own "8B" flavor) with 4 of its 32 layers;
- `70B_2L`: Llama 3 70B (torchtitan's "70B" flavor) with 2 of its 80 layers;
- `1B`: Llama 3.2 1B's shape (hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192 = 1.5 x 2/3 x 4h rounded to
  256); torchtitan's llama3 model does not tie embeddings, so this one has an untied output head (1.50 B
  parameters, Llama 3.2 1B has 1.24 B).
"""

from torchtitan.models.llama3 import TransformerModelArgs, llama3_args

llama3_args["8B_4L"] = TransformerModelArgs(dim=4096, n_layers=4, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3,
                                            multiple_of=1024, rope_theta=500000)
llama3_args["70B_2L"] = TransformerModelArgs(dim=8192, n_layers=2, n_heads=64, n_kv_heads=8, ffn_dim_multiplier=1.3,
                                             multiple_of=4096, rope_theta=500000)
llama3_args["1B"] = TransformerModelArgs(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.5,
                                         multiple_of=256, rope_theta=500000)

if __name__ == "__main__":
    from torchtitan.train import Trainer, main

    main(Trainer)
