"""The cost model: profiled blocks + communication model -> integer coefficients -> evaluate (no torch)."""
