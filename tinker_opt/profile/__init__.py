"""Profiling blocks and collectives. Only the measuring modules import torch; `store` does not."""
