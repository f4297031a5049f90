"""The rule registry: every rule, in code order. Docs and `explain` read from here."""
from __future__ import annotations

from .base import Rule
from .tpf001_retained_graph import RetainedGraph
from .tpf002_eval_without_no_grad import EvalWithoutNoGrad
from .tpf003_missing_zero_grad import MissingZeroGrad
from .tpf004_unscaled_accumulation import UnscaledAccumulation
from .tpf005_softmax_before_cross_entropy import SoftmaxBeforeCrossEntropy
from .tpf006_bce_activation_mismatch import BceActivationMismatch
from .tpf007_stuck_eval_mode import StuckEvalMode
from .tpf008_ddp_without_sharding import DdpWithoutSharding
from .tpf009_sampler_epoch_not_set import SamplerEpochNotSet
from .tpf010_hot_loop_sync import HotLoopSync
from .tpf011_unseeded_randomness import UnseededRandomness
from .tpf012_optimizer_state_reset import OptimizerStateReset
from .tpf013_input_pipeline_stall import InputPipelineStall
from .tpf014_amp_scaler_protocol import AmpScalerProtocol
from .tpf015_accumulation_undone import AccumulationUndone
from .tpf016_call_without_parentheses import CallWithoutParentheses
from .tpf017_optimizer_before_sharding import OptimizerBeforeSharding
from .tpf018_training_loader_not_shuffled import TrainingLoaderNotShuffled

ALL_RULES = (
    RetainedGraph,
    EvalWithoutNoGrad,
    MissingZeroGrad,
    UnscaledAccumulation,
    SoftmaxBeforeCrossEntropy,
    BceActivationMismatch,
    StuckEvalMode,
    DdpWithoutSharding,
    SamplerEpochNotSet,
    HotLoopSync,
    UnseededRandomness,
    OptimizerStateReset,
    InputPipelineStall,
    AmpScalerProtocol,
    AccumulationUndone,
    CallWithoutParentheses,
    OptimizerBeforeSharding,
    TrainingLoaderNotShuffled,
)

__all__ = ["ALL_RULES", "Rule"]
