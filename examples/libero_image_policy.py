"""A small image policy evaluated on a LIBERO task through `simuguard audit`, as a VLA is.

The policy follows the audit's protocol (simuguard_gym.policy): ``reset(info)`` at every
episode, ``act(observation, info)`` returning a chunk of actions. It reads LIBERO's agentview
and wrist images and the task's instruction, and holds still for the settle steps LIBERO's
evaluation starts with. Its weights are random: the point is that images and instructions flow
and the protocol holds, recorded and monitored.

    simuguard audit --env simuguard_gym/Libero-v0 \\
        --env-kwargs '{"suite": "libero_object", "task_id": 0, "use_camera_obs": true, "max_steps": 40}' \\
        --policy examples/libero_image_policy.py:ImagePolicy --episodes 2 --out runs/libero_images

or, from this directory, ``--policy libero_image_policy:ImagePolicy``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

SETTLE_STEPS = 15
NOOP = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)
CHUNK = 4


class ImagePolicy:
    """Two camera images and an instruction in, a chunk of 7-D LIBERO actions out."""

    def __init__(self, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.vision = nn.Sequential(nn.Conv2d(6, 8, 5, stride=4), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                                    nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.words = nn.EmbeddingBag(256, 16)  # the instruction's characters: a stand-in for a language model
        self.head = nn.Linear(8 * 16 + 16, CHUNK * 7)
        self.steps = 0
        self.instruction = ""

    def reset(self, info: dict) -> None:
        self.steps = 0
        self.instruction = info.get("instruction", "")

    @torch.no_grad()
    def act(self, observation: dict, info: dict) -> np.ndarray:
        if self.steps < SETTLE_STEPS:  # LIBERO's evaluation lets objects settle first
            self.steps += 1
            return NOOP
        images = np.concatenate([observation["agentview_image"], observation["robot0_eye_in_hand_image"]], axis=-1)
        pixels = torch.from_numpy(images.astype(np.float32) / 255.0).permute(2, 0, 1)[None]
        text = observation.get("instruction", self.instruction)
        chars = torch.tensor([[min(ord(c), 255) for c in text] or [0]])
        features = torch.cat([self.vision(pixels), self.words(chars)], dim=1)
        chunk = torch.tanh(self.head(features)).reshape(CHUNK, 7).numpy().astype(np.float64)
        chunk[:, :6] *= 0.3  # small motions
        self.steps += CHUNK
        return chunk
