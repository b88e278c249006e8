"""Benchmark env objects as evaluation harnesses build them (not Gymnasium envs), with module-level
factories so that recordings name them and replays rebuild them.

``PlaceCanTask`` is written like RoboTwin's task classes: it owns a SAPIEN scene and steps it
itself; an episode starts with ``setup_demo(seed=...)``, an action is ``take_action(action)``,
the observation is ``get_obs()`` and the outcome ``check_success()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

LIFT_CAMERAS = ["agentview", "robot0_eye_in_hand"]


def robosuite_lift(cameras: bool = True, size: int = 128, horizon: int = 20, seed: int = 0) -> Any:
    """robosuite's Lift as ``suite.make`` builds it, with agentview and wrist cameras."""
    import robosuite

    return robosuite.make("Lift", robots="Panda", has_renderer=False, has_offscreen_renderer=cameras,
                          use_camera_obs=cameras, camera_names=LIFT_CAMERAS, camera_heights=size,
                          camera_widths=size, horizon=horizon, seed=seed)


class PlaceCanTask:
    """A RoboTwin-style task: a gripper holds a can above the basket; actions move the gripper."""

    step_lim = 12
    substeps = 10
    action_dim = 6  # x, y, z, yaw, left and right finger opening

    def __init__(self, lazy: bool = False) -> None:
        # The built-in task's scene builder; this class steps the scene itself, as a harness does.
        # lazy: no scene until the first setup_demo, as RoboTwin's tasks build theirs.
        self._builder: Any = None if lazy else self._new_builder()
        self.take_action_cnt = 0

    @staticmethod
    def _new_builder() -> Any:
        from simuguard_gym.envs.place_can_basket import PlaceCanBasketEnv

        return PlaceCanBasketEnv()

    @property
    def scene(self) -> Any:  # rebuilt by every setup_demo
        return None if self._builder is None else self._builder.scene

    def setup_demo(self, seed: int = 0) -> None:
        if self._builder is None:
            self._builder = self._new_builder()
        self._builder.reset(seed=int(seed))
        self.gripper, self.can, self.plan = self._builder.gripper, self._builder.can, self._builder.plan
        self.take_action_cnt = 0

    def take_action(self, action: np.ndarray) -> None:
        action = np.asarray(action, np.float32)
        targets = [*action[:4], action[4] + 0.006, action[5] + 0.006]
        for joint, target in zip(self.gripper.active_joints, targets):
            joint.set_drive_target(np.float32(target))
        for _ in range(self.substeps):
            self.scene.step()
        self.take_action_cnt += 1

    def expert_action(self) -> np.ndarray:
        return self.plan.action(self.take_action_cnt, closed=0.031, dt=0.04).astype(np.float32)

    def get_obs(self) -> dict[str, np.ndarray]:
        pose = self.can.entity_pose
        return {"can_pose": np.concatenate([pose.p, pose.q]).astype(np.float64), "qpos": self.gripper.qpos.copy()}

    def check_success(self) -> bool:
        return bool(self._builder._check_success())


def dm_control_suite(domain: str = "cartpole", task: str = "swingup", time_limit: float = 1.0, seed: int = 0) -> Any:
    """A dm_control suite task as its users load it (``suite.load``), its episodes cut to
    ``time_limit`` seconds."""
    from dm_control import suite

    return suite.load(domain, task, task_kwargs={"random": seed, "time_limit": time_limit})
