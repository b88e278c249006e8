"""Doctest collection: modules of optional engines are skipped where the engine is not installed."""

import importlib.util

collect_ignore = []
if importlib.util.find_spec("sapien") is None:
    collect_ignore += ["simuguard_gym/engines/sapien.py", "simuguard_gym/envs/place_can_basket.py"]
