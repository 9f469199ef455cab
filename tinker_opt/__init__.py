"""tinker-opt: find the fastest parallel strategy for a Megatron-LM / MindSpeed-LLM training script."""

__version__ = "0.1.0"
