"""Hardware/model co-design workbench for AI training.

The core (catalogs, analytical model) imports neither torch, triton nor any UI package:

    >>> import workbench
    >>> workbench.get_gpu("mi355x").ridge_point("bf16")
    >>> workbench.predict("llama3-70b", "h200", micro_batch=1, seq_len=8192, gpus=8).summary
"""

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError, UnknownNameError, WorkbenchError
from workbench.hardware import GPU, get_gpu, list_gpus, load_gpu
from workbench.models import from_hf_config, get_model, list_models, load_model
from workbench.predict import Prediction, predict

__version__ = "0.1.0"

__all__ = [
    "GPU", "Parallelism", "Prediction", "SpecError", "TrainingConfig", "UnknownNameError", "WorkbenchError",
    "from_hf_config", "get_gpu", "get_model", "list_gpus", "list_models", "load_gpu", "load_model", "predict",
]
