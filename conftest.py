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
