"""The solvers: exact split, bounds, mixed stacks, CP-SAT / MILP models, enumeration and search (no torch)."""
