"""Strategy space, cost model and the solvers (no torch needed here)."""
