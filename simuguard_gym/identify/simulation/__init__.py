"""Identification through MuJoCo simulation (RigPI stage 2): the candidate body as an MjModel,
multiple shooting and the optimisers, ParamIdentify's sampler, and synthetic data with a known
truth. The only part of identify/ that imports a simulator; the math is numpy-only."""
