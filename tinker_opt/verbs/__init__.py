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

from tinker_opt.verbs.calibrate_comm import run_calibrate_comm
from tinker_opt.verbs.calibrate_log import run_calibrate_log
from tinker_opt.verbs.check import DeviceChoice, run_check
from tinker_opt.verbs.common import Log, Progress, job_options
from tinker_opt.verbs.profile import run_profile
from tinker_opt.verbs.profile_comm import CommProfileOutcome, run_profile_comm
from tinker_opt.verbs.scripts import run_apply, run_calibrate, run_inspect
from tinker_opt.verbs.search import RunLog, SearchOutcome, run_all, run_search
from tinker_opt.verbs.simulate import run_simulate

__all__ = [
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
