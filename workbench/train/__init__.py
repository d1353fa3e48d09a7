"""The reference training job: it runs what a recipe describes, with PyTorch, and measures it.

``python -m workbench.train --recipe FILE`` builds the recipe's model (a Llama-family transformer or a
DLRM-DCNv2 recommender from the catalog, with the recipe's ``model.overrides``), applies its precision (bf16
autocast, fp8 via torchao or the project's fp8 GEMM), activation checkpointing, torch.compile, the project's
Triton kernels where the recipe chose them, and FSDP2 / tensor parallelism under torchrun. It logs step time,
tokens/s, peak memory and loss, and writes a metrics JSON comparing the measurements with the recipe's
``predicted`` block.

Only this package imports torch: ``spec`` (what a recipe asks for, validated) is pure Python; ``job`` and the
modules it uses need torch.
"""
