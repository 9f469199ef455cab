"""The weight-gradient accumulation that `--no-gradient-accumulation-fusion` leaves unfused.

With Megatron's default gradient-accumulation fusion, the weight-gradient GEMM of every linear
layer accumulates straight into the parameter's fp32 (or gradient-dtype) `main_grad`
(megatron/core/tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication.backward:
`fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32(total_input, grad_output, weight.main_grad)`;
Transformer Engine's linear modules likewise with `fuse_wgrad_accumulation`). Without it the GEMM
writes a new gradient tensor in the compute dtype, `param.grad`, and the backward post-hook of
Megatron's DDP adds it to the main grad: `param.main_grad.add_(param.grad.data); param.grad = None`
(megatron/core/distributed/distributed_data_parallel.py `_make_backward_post_hook`), once per
parameter and micro-batch.

The profiled (and analytic) backward prices the GEMM writing its output and nothing more, so the
unfused run adds that elementwise add: it reads the gradient (bytes_per_element) and the main grad
(grad_bytes) and writes the main grad (grad_bytes), memory-bound at the HBM bandwidth.
ASSUMPTION: every parameter of the layer takes the add (norm weights and biases do in both modes;
they are a fraction of a percent of a transformer layer's parameters) and the kernel launches
are hidden behind the queue (one per weight).
"""

from __future__ import annotations


def unfused_accumulation_us(
    param_count: int, bytes_per_element: int, grad_bytes: int, memory_bandwidth_gbs: float
) -> float:
    """Microseconds per micro-batch of `param.main_grad.add_(param.grad)` over `param_count`
    parameters (the module docstring)."""
    moved = param_count * (bytes_per_element + 2 * grad_bytes)
    return moved / (memory_bandwidth_gbs * 1e3)  # 1 GB/s = 1e3 B/us
