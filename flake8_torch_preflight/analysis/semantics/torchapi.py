"""What the analysis knows about the torch API and the training frameworks.

Everything here is keyed by *qualified* names (see `imports.py`) or by tensor method names,
so a table entry is a fact about torch, not a guess about how a user spells a variable.
"""
from __future__ import annotations

import re

# --- values that carry (or break) an autograd graph ---------------------------------

# Tensor methods whose result keeps the autograd graph of the receiver.
GRAPH_KEEPING_METHODS = frozenset(
    """sum mean view reshape to float half double bfloat16 cuda cpu contiguous clone squeeze
    unsqueeze flatten permute transpose t expand expand_as repeat narrow chunk split unbind
    exp log log_softmax softmax sigmoid tanh relu abs pow sqrt rsqrt neg clamp clamp_ clip
    max min norm std var prod cumsum masked_fill gather index_select type_as view_as squeeze_
    mul add sub div matmul mm bmm flip roll diag triu tril logsumexp square sin cos
    __getitem__ type requires_grad_""".split()
)

# Tensor methods and attributes whose result holds no graph.
GRAPH_BREAKING_METHODS = frozenset(
    """detach detach_ item tolist numpy argmax argmin argsort size dim numel nelement
    element_size data_ptr eq ne lt le gt ge isnan isinf isfinite all any nonzero
    stride is_contiguous get_device""".split()
) | frozenset(
    # casts to an integer or boolean dtype: such tensors cannot require grad (token ids)
    "long int short byte bool char".split())
GRAPH_BREAKING_ATTRS = frozenset(
    "data grad shape ndim dtype device is_cuda requires_grad grad_fn T_is_leaf".split()
)
# Methods whose result is a host Python value (a sync point when the tensor is on GPU).
HOST_SYNC_METHODS = frozenset("item tolist numpy".split())

PYTHON_BREAKERS = frozenset({"float", "int", "bool", "len", "str", "round", "repr", "isinstance"})

TORCH_BREAKING_FUNCS = frozenset(
    f"torch.{n}" for n in "argmax argmin argsort eq ne lt le gt ge isnan isinf isfinite numel "
    "is_tensor zeros ones empty full arange linspace randn rand randint randperm zeros_like "
    "ones_like empty_like full_like tensor as_tensor from_numpy manual_seed".split()
)

GRAD_DISABLING = frozenset(
    {
        "torch.no_grad",
        "torch.inference_mode",
        "torch.autograd.no_grad",
        "torch.autograd.grad_mode.no_grad",
        "torch.autograd.inference_mode",
    }
)
SET_GRAD_ENABLED = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"})
# Calls that differentiate their first argument without `.backward()` (gradient penalties,
# input-gradient saliency, adversarial attacks): they need autograd to have recorded it.
GRADIENT_FUNCS = frozenset(
    {"torch.autograd.grad", "torch.autograd.functional.vjp", "torch.autograd.functional.jvp",
     "torch.autograd.functional.jacobian", "torch.autograd.functional.hessian",
     "torch.autograd.functional.vhp", "torch.autograd.functional.hvp"})
# Packages whose functions never run autograd on what they are given (numbers, logging).
NON_DIFFERENTIATING_PACKAGES = frozenset(
    {"numpy", "math", "statistics", "logging", "json", "pickle", "wandb", "tensorboard",
     "tensorboardX", "mlflow", "tqdm", "rich", "loguru", "builtins", "sys", "os", "time"})

# --- constructors -------------------------------------------------------------------

LOSS_FUNCTIONS = frozenset(
    f"torch.nn.functional.{n}"
    for n in "cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss "
    "binary_cross_entropy binary_cross_entropy_with_logits kl_div cosine_embedding_loss "
    "margin_ranking_loss triplet_margin_loss ctc_loss poisson_nll_loss gaussian_nll_loss "
    "hinge_embedding_loss multilabel_margin_loss multilabel_soft_margin_loss "
    "multi_margin_loss soft_margin_loss".split()
)

SOFTMAX_FUNCS = frozenset({"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"})
LOG_SOFTMAX_FUNCS = frozenset(
    {"torch.log_softmax", "torch.nn.functional.log_softmax", "torch.special.log_softmax"}
)
SIGMOID_FUNCS = frozenset({"torch.sigmoid", "torch.nn.functional.sigmoid", "torch.special.expit"})
SOFTMAX_MODULES = frozenset({"torch.nn.Softmax", "torch.nn.Softmax2d"})
LOG_SOFTMAX_MODULES = frozenset({"torch.nn.LogSoftmax"})
SIGMOID_MODULES = frozenset({"torch.nn.Sigmoid"})

# Calls whose result is an nn.Module: library model factories, and torch's wrappers of a
# model (still the same model, its class and its DDP-ness kept).
HF_MODEL_FACTORY_RE = re.compile(
    r"^(transformers\.(Auto\w*Model\w*|\w*(Model|ForCausalLM|For\w+))\.from_pretrained"
    r"|transformers\.(?!DataCollator)\w*(Model|For\w+)"   # not `DataCollatorForSeq2Seq`
    r"|peft\.get_peft_model|peft\.PeftModel\.from_pretrained"
    r"|diffusers\.(?!\w*Pipeline)\w+Model\w*(\.from_pretrained)?)$"
)
VISION_MODEL_FACTORY_RE = re.compile(r"^(timm\.create_model|torchvision\.models\.\w+)$")
TORCH_MODEL_WRAPPER_RE = re.compile(
    r"^(torch\.compile|torch\.jit\.script|torch\.nn\.parallel\.DistributedDataParallel"
    r"|torch\.nn\.DataParallel|torch\.nn\.parallel\.DataParallel"
    r"|torch\.distributed\.fsdp\.\w*FullyShardedDataParallel\w*"
    r"|torch\.distributed\.fsdp\.FSDP)$"
)
# Functions that return whatever was saved (a module, a state dict, a tensor, a list of
# them): what they give is of no known kind, not a tensor.
LOADED_OBJECT_FUNCS = frozenset({"torch.load", "torch.hub.load"})
# `torch.jit.load(path)`: always a ScriptModule.
SCRIPT_MODULE_LOADERS = frozenset({"torch.jit.load"})

OPTIMIZER_RE = re.compile(
    r"^(torch\.optim\.(?!lr_scheduler)\w+|bitsandbytes\.optim\.\w+|bnb\.optim\.\w+"
    r"|transformers\.(AdamW|Adafactor)|apex\.optimizers\.\w+|timm\.optim\.\w+"
    r"|deepspeed\.ops\.\w+\.\w+|\w+(\.\w+)*\.(\w*Optimizer|AdamW|SGD|Adam|Lion|Adafactor))$"
)
OPTIMIZER_FACTORY_RE = re.compile(r"^(timm\.optim\.create_optimizer\w*)$")
SCHEDULER_RE = re.compile(
    r"^(torch\.optim\.lr_scheduler\.\w+|transformers\.get_\w*schedule\w*"
    r"|transformers\.optimization\.get_\w*schedule\w*|timm\.scheduler\.\w+)$"
)
SCALER_NAMES = frozenset(
    {"torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.cpu.amp.GradScaler",
     "torch.GradScaler"}
)
# Progress bars that iterate what they wrap, and whose context manager returns the bar itself
# (`with tqdm(loader) as bar: for batch in bar:`): for iteration, the bar is what it wraps.
PROGRESS_WRAPPERS = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm",
                               "tqdm.std.tqdm", "tqdm.rich.tqdm", "rich.progress.track"})
DATALOADER_NAMES = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader",
                              # torchdata's checkpointable loader (a DataLoader subclass)
                              "torchdata.stateful_dataloader.StatefulDataLoader",
                              "torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader"})
# Draws from torch's global generator: fresh random tensors.
TORCH_DRAWS = frozenset(f"torch.{n}" for n in "rand randn randint randperm rand_like randn_like "
                        "randint_like normal bernoulli multinomial poisson".split())
TENSOR_INPLACE_DRAWS = frozenset({"random_", "normal_", "uniform_", "bernoulli_", "exponential_",
                                  "geometric_", "cauchy_", "log_normal_"})
TENSOR_DATASETS = frozenset({"torch.utils.data.TensorDataset",
                             "torch.utils.data.dataset.TensorDataset"})
# Datasets of random samples drawn on the spot (nothing to shard across ranks).
FAKE_DATASETS = frozenset({"torchvision.datasets.FakeData", "torchvision.datasets.fakedata.FakeData"})
DISTRIBUTED_SAMPLERS = frozenset(
    {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler",
     # a DistributedSampler subclass that also checkpoints its position: shuffles by epoch
     "torchdata.stateful_dataloader.sampler.StatefulDistributedSampler",
     "torchdata.stateful_dataloader.StatefulDistributedSampler"}
)
# Groups the indices another sampler draws into batches (its first argument): iterating it
# iterates that sampler, so a `DistributedSampler` inside still needs `set_epoch`.
BATCH_SAMPLERS = frozenset({"torch.utils.data.BatchSampler",
                            "torch.utils.data.sampler.BatchSampler"})
DDP_WRAPPERS = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "torch.distributed.fsdp.FSDP",
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "apex.parallel.DistributedDataParallel",
        "apex.parallel.distributed.DistributedDataParallel",
        # Opacus (differential privacy): its DDP, and its FSDP2 wrapper (`fully_shard` inside)
        "opacus.distributed.DifferentiallyPrivateDistributedDataParallel",
        "opacus.utils.fsdp_utils.FSDP2Wrapper",
    }
)
# Data-parallel engines that wrap the model like DDP: each rank trains on what it is given.
DATA_PARALLEL_ENGINES = frozenset({"deepspeed.initialize"})
# Opacus's `PrivacyEngine` methods that rebuild the loader they get: with Poisson sampling
# (the default) the new loader draws each rank's batches from a rank-aware sampler; with
# `poisson_sampling=False` the loader's own sampler is kept.
PRIVACY_RESAMPLING_METHODS = frozenset({"make_private", "make_private_with_epsilon"})

ACCELERATOR_NAMES = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
# `prepare_pippy(model, ...)` splits the model into pipeline stages and returns it, its forward
# replaced (Accelerate docs, "Pipeline parallelism"): still that module.
ACCELERATE_MODEL_WRAPPERS = frozenset({"accelerate.prepare_pippy",
                                       "accelerate.inference.prepare_pippy"})
FABRIC_NAMES = frozenset({"lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric"})
DEEPSPEED_INIT = frozenset({"deepspeed.initialize"})

LIGHTNING_MODULES = frozenset(
    {"lightning.LightningModule", "lightning.pytorch.LightningModule",
     "pytorch_lightning.LightningModule", "pytorch_lightning.core.LightningModule",
     "pytorch_lightning.core.module.LightningModule", "lightning.pytorch.core.LightningModule"}
)
HF_TRAINERS = frozenset(
    {"transformers.Trainer", "transformers.Seq2SeqTrainer", "transformers.trainer.Trainer",
     "trl.SFTTrainer", "trl.DPOTrainer", "transformers.TrainerCallback"}
)
NN_MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"}) | LIGHTNING_MODULES

# Parameters whose name says they hold a model: the spec's "`model`-like parameter".
MODEL_PARAM_RE = re.compile(r"^(model|net|network|module|encoder|decoder|generator|"
                            r"discriminator|backbone|student|teacher|classifier|policy|critic|"
                            r"actor|unet|vae|transformer|ddp_model|\w+_model|model_\w+)$")
OPTIMIZER_NAME_RE = re.compile(r"(^|_)(optim|optimizer|opt)(\d*|_\w+)?$|^optimizer")
SCHEDULER_NAME_RE = re.compile(r"sched")


def is_torch_nn_class(qualname: str) -> bool:
    """`torch.nn.Linear`: a module class (capitalised, directly under torch.nn)."""
    if not qualname.startswith("torch.nn."):
        return False
    last = qualname.rsplit(".", 1)[-1]
    return last[:1].isupper() and ".functional." not in qualname and ".init." not in qualname


def is_loss_class(qualname: str) -> bool:
    return is_torch_nn_class(qualname) and qualname.endswith("Loss")
