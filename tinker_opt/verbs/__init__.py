"""The work of every verb (profile, search, simulate, all, inspect, apply, calibrate, check), in one package.

cli.py parses the command line into settings objects (config.py) and prints what these functions
return; nothing here prints. Heavy imports (torch, solvers) happen inside the functions so that
`search` and `simulate` never import torch and `--help` stays fast. The cost model and solvers
(tinker_opt.costs, tinker_opt.solve) are imported by no other verb code: here at the top (Strategy) and inside
`common.cost_model_for`, `search._solve` and `simulate._strategy_from_flags`, so that moving them
is a change here alone.

One module per verb (profile, search with all, simulate, scripts: inspect / apply / calibrate,
check, calibrate_log: calibrate --log, calibrate_comm: calibrate --comm, profile_comm:
profile-comm) and
common.py for what they share; the package exports the verbs cli.py calls.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinker_opt.verbs.calibrate_comm import run_calibrate_comm
    from tinker_opt.verbs.calibrate_log import run_calibrate_log
    from tinker_opt.verbs.check import DeviceChoice, run_check
    from tinker_opt.verbs.common import Log, Progress, job_options
    from tinker_opt.verbs.profile import run_profile
    from tinker_opt.verbs.profile_comm import CommProfileOutcome, run_profile_comm
    from tinker_opt.verbs.scripts import inspect_cell, run_apply, run_calibrate, run_inspect
    from tinker_opt.verbs.search import RunLog, SearchOutcome, run_all, run_search
    from tinker_opt.verbs.simulate import run_simulate

_HOMES = {
    "run_calibrate_comm": "calibrate_comm",
    "run_calibrate_log": "calibrate_log",
    "DeviceChoice": "check",
    "run_check": "check",
    "Log": "common",
    "Progress": "common",
    "job_options": "common",
    "run_profile": "profile",
    "CommProfileOutcome": "profile_comm",
    "run_profile_comm": "profile_comm",
    "run_apply": "scripts",
    "run_calibrate": "scripts",
    "run_inspect": "scripts",
    "inspect_cell": "scripts",
    "RunLog": "search",
    "SearchOutcome": "search",
    "run_all": "search",
    "run_search": "search",
    "run_simulate": "simulate",
}
"""{exported name: the verb module that defines it}. A name is imported on first use (PEP 562
module `__getattr__`), so a verb loads its own module and not the others' (`search` never imports
calibrate --comm's pandas fits or check's log readers at start-up: issue 30)."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "inspect_cell",
    "CommProfileOutcome",
    "DeviceChoice",
    "Log",
    "Progress",
    "RunLog",
    "SearchOutcome",
    "job_options",
    "run_all",
    "run_apply",
    "run_calibrate",
    "run_calibrate_comm",
    "run_calibrate_log",
    "run_check",
    "run_inspect",
    "run_profile",
    "run_profile_comm",
    "run_search",
    "run_simulate",
]
