"""Run the `tinker-opt` CLI as its console script does, and print when each phase began and ended.

    PYTHONPATH=TREE python benchmarks/phase_runner.py STAMP_FILE search --profiled-data-path ...

The child half of benchmarks/search_speed.py: the arguments after STAMP_FILE are the CLI's. The
process is the CLI's own (`tinker_opt.cli.main`, as the `tinker-opt` entry point calls it); an
import hook wraps the functions that bound the phases right after their module is first imported,
so nothing is imported earlier or later than the CLI itself would. At exit the stamps
(`time.time()` of each phase's start and end, its wall and CPU seconds summed over repeated
calls) are written to STAMP_FILE as JSON; the parent adds the process's start and end and names the phases:

* start-up: the interpreter, the CLI's imports and the option parsing, until the verb reads;
* reading: the profile, the script and the cost model (`verbs.search._search_run`);
* presolve: the space's configurations and their bounds (`solve.enumerate.presolve`, all calls);
* solve: the rest of the ranking (`verbs.search._solve` less the presolve);
* picks: the script's own strategy, the picks, the Pareto front (`verbs.search._choices`);
* writing: the results folder (`emit.search_folder.write_search_folder`);
* profile: `verbs.profile.run_profile` (the `profile` verb, and `all`'s first half).
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import json
import sys
import time

PHASES = {
    "tinker_opt.verbs.search": ("_search_run", "_solve", "_choices"),
    "tinker_opt.solve.enumerate": ("presolve",),
    "tinker_opt.emit.search_folder": ("write_search_folder",),
    "tinker_opt.verbs.profile": ("run_profile",),
    "tinker_opt.verbs": ("run_search", "run_all"),
}
"""{module: functions whose calls are timed}; `tinker_opt.verbs` marks where the verb begins."""

STAMPS: dict[str, list[float]] = {}
"""{function: [first start, last end, seconds inside, CPU seconds inside (`time.process_time`),
both summed over calls]}."""


def _timed(name: str, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        started, cpu = time.time(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            ended = time.time()
            stamp = STAMPS.setdefault(name, [started, ended, 0.0, 0.0])
            stamp[1] = ended
            stamp[2] += ended - started
            stamp[3] += time.process_time() - cpu

    return wrapper


class _Hook(importlib.abc.MetaPathFinder):
    """Wraps the PHASES functions of a module right after the module runs."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in PHASES:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for name in PHASES[fullname]:
                if hasattr(module, name):
                    setattr(module, name, _timed(name, getattr(module, name)))

        spec.loader.exec_module = exec_module
        return spec


def _write(path: str) -> None:
    """The stamps, and under "process" this process's own CPU seconds until now (the CLI's,
    without its children: the picture worker's drawing is not in it)."""
    with open(path, "w") as handle:
        json.dump({**STAMPS, "process": [0, 0, 0.0, time.process_time()]}, handle)


def main() -> None:
    stamp_file = sys.argv[1]
    sys.argv = ["tinker-opt", *sys.argv[2:]]
    sys.meta_path.insert(0, _Hook())
    atexit.register(_write, stamp_file)
    from tinker_opt.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
