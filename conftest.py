"""Doctest collection: modules of optional dependencies are skipped where they are not installed."""

import importlib.util
import os
import tempfile

# The tests' recordings are signed with a key of their own, never the user's (recording/trust.py);
# set in the environment, so that the processes the tests start use it too.
os.environ.setdefault("SIMUGUARD_CONFIG_DIR", tempfile.mkdtemp(prefix="simuguard-test-config-"))

collect_ignore = []
collect_ignore_glob = []
if importlib.util.find_spec("sapien") is None:
    collect_ignore_glob += ["simuguard_gym/engines/sapien*.py"]  # every SAPIEN adapter module
    collect_ignore += ["simuguard_gym/physx_repair/gjk_probe.py", "simuguard_gym/physx_repair/onset_pair.py",
                       "simuguard_gym/physx_repair/hull_sources.py",
                       "tests/pair_scenes.py",
                       "simuguard_gym/envs/place_can_basket.py"]
if importlib.util.find_spec("stable_baselines3") is None:
    collect_ignore += ["simuguard_gym/integrations/sb3.py"]


# CI runs every test in the core venv, and in the venvs of the extras only what the core run could
# not: the tests it skipped (an extra missing) and those marked `extras` (they take another path
# where an extra is installed). SIMUGUARD_SKIPPED_OUT names the file of their node ids, one a line,
# which pytest reads back as `pytest @FILE`. Reports reach the main process under pytest-xdist too.
_SKIPPED_OUT = os.environ.get("SIMUGUARD_SKIPPED_OUT")
_rerun_elsewhere: dict[str, None] = {}  # insertion-ordered set


def pytest_collectreport(report):
    if _SKIPPED_OUT and report.skipped:  # a module's importorskip
        _rerun_elsewhere[report.nodeid] = None


def pytest_runtest_logreport(report):
    if _SKIPPED_OUT and (report.skipped or (report.when == "setup" and "extras" in report.keywords)):
        _rerun_elsewhere[report.nodeid] = None


def pytest_sessionfinish(session):
    if _SKIPPED_OUT and not hasattr(session.config, "workerinput"):  # xdist's workers report to the main process
        with open(_SKIPPED_OUT, "w") as out:
            out.writelines(f"{nodeid}\n" for nodeid in _rerun_elsewhere)
