"""The loss's saved bytes when Transformer Engine's cross entropy runs.

Source: Megatron-Core's language model loss (megatron/core/models/common/language_module/
language_module.py compute_language_model_loss) runs `te_parallel_cross_entropy` with
`--cross-entropy-loss-fusion --cross-entropy-fusion-impl te` (NeMo's performance recipes set
cross_entropy_fusion_impl "te": scripts/performance/helpers.py set_perf_optimization_configs).
Transformer Engine's CrossEntropyFunction (transformer_engine/pytorch/cross_entropy.py, its triton
kernel in pytorch/triton/cross_entropy.py) writes the logits' gradient into the logits tensor
itself, in the logits' dtype, and saves that one tensor (`ctx.save_for_backward(_input.detach())`).
The native paths (`vocab_parallel_cross_entropy`, core/fusions/fused_cross_entropy.py) cast the
logits to fp32 and save the fp32 softmax, as the profiled head does (profile/tp_emulation.py
VocabParallelCrossEntropy).

Rule: per logit of a micro-batch on the head's rank (s*b/cp tokens x padded vocabulary / tp), TE
keeps `bpe` bytes, not 4: the head's activation bytes are (4 - bpe) x logits lower.
ASSUMPTION: the head's transient peak stays as profiled (the native path's fp32 work tensors),
which errs high.
"""

from __future__ import annotations

from tinker_opt.costs.units import m_tokens
from tinker_opt.strategy import Strategy

FP32_BYTES = 4


def te_loss_saving_bytes(model, s: Strategy, bpe: int) -> int:
    """Bytes the head keeps fewer per micro-batch with TE's cross entropy (0 without it)."""
    if not model.te_cross_entropy or bpe >= FP32_BYTES:
        return 0
    logits = m_tokens(model, s) * (model.vocab_size_for(s.tp) // s.tp)
    return logits * (FP32_BYTES - bpe)
