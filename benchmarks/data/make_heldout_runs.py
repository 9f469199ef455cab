"""Writes benchmarks/data/heldout_runs.json: the held-out published runs, each with its source and
what is stated vs inferred (the TFLOPS-derived iteration times computed here, formula in the row).

    python benchmarks/data/make_heldout_runs.py   (from the repository root)
"""

import json

import heldout_910b_rc3_rows
import heldout_910b_rows
import heldout_modelzoo_rows
import heldout_nemo_rows

rows = (
    heldout_modelzoo_rows.rows
    + heldout_nemo_rows.rows
    + heldout_910b_rows.rows
    + heldout_910b_rc3_rows.rows
)

about = (
    "Held-out published measured runs (NOT in shared/data/published_calibration.json) for checking the model on MoE, "
    "context-parallel and H100 jobs; the same row shape as the shared file (benchmarks/published_runs.py reads it). "
    "Each row names its source and says what is stated and what is inferred ([inferred] / [derived] / ASSUMPTION). "
    "`strategy.extra_flags` are Megatron flags of the run's config written into the launch script as they are. "
    "Held out: never fit to these rows."
)
with open("benchmarks/data/heldout_runs.json", "w") as out:
    json.dump({"about": about, "runs": rows}, out, indent=1)
print(len(rows))
for r in rows:
    print(r["id"], r.get("derived", {}))
