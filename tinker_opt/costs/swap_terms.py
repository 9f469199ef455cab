"""MindSpeed's `--swap-attention`: each layer's attention activations kept on the host.

Ascend/MindSpeed docs/features/swap_attention.md and mindspeed/core/memory/swap_attention/
(prefetch.py SwapTensor, the feature's saved-tensor hooks): the tensors the swapped modules save
for the backward are copied to pinned host memory on a side stream after the module's forward
(device -> host) and prefetched back while the backward of the layer after it runs (host ->
device), so the copy overlaps compute; in the mcore models the default `--swap-modules` is the
self_attention module alone. It needs flash attention (no seq x seq scores are saved).

What the self_attention module saves per micro-batch (Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", section 4.1, the attention block without
the s^2 terms that flash attention removes): the linear_qkv input (tokens x hidden, split over tp
with sequence parallelism), Q (tokens x hidden / tp), K and V (tokens x groups x head_dim / tp
each) and the core attention output that linear_proj reads (tokens x hidden / tp), all in the
activation dtype. ASSUMPTION: multi-latent attention is counted with the same shapes (its
compressed K/V are smaller, so this errs on the saving), the attention's dropout mask (none at
dropout 0, the usual LLM setting) and the flash kernel's softmax statistics (tokens x heads fp32,
under 1 % of the rest) are left out, and the prefetched layer on the device during its backward
is covered by the recompute working set already counted.

Time: the copy out during the layer's forward and back during its backward, each at the
device-host bandwidth (`host_link_gbs` of the hardware description), exposed only where it is
longer than that layer's own forward / backward compute (costs/overlap.py `exposed`).
"""

from __future__ import annotations

from tinker_opt.costs.overlap import exposed


def swap_attention_bytes(model, tokens: int, tp: int, sp: bool, bytes_per_element: int) -> int:
    """Bytes of one layer's self_attention activations per micro-batch (module docstring);
    `tokens` is the micro-batch's tokens on one context-parallel rank."""
    kv_width = model.num_query_groups * model.kv_channels
    qkv_input = model.hidden_size // tp if sp else model.hidden_size
    per_token = qkv_input + (2 * model.hidden_size + 2 * kv_width) // tp
    return tokens * per_token * bytes_per_element


def swap_exposed_us(
    swapped_bytes: int, host_link_gbs: float, forward_us: float, backward_us: float
) -> float:
    """Exposed microseconds of the copy out (forward) and back (backward) of `swapped_bytes`."""
    copy_us = swapped_bytes / (host_link_gbs * 1e3)  # 1 GB/s = 1e3 B/us
    return exposed(copy_us, forward_us) + exposed(copy_us, backward_us)
