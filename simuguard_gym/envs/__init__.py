"""Built-in envs, registered with Gymnasium on import of ``simuguard_gym.envs``."""

from gymnasium.envs.registration import register, registry

from simuguard_gym.envs.mujoco_scene import MujocoSceneEnv

__all__ = ["MujocoSceneEnv"]

if "simuguard_gym/MujocoScene-v0" not in registry:
    register(id="simuguard_gym/MujocoScene-v0", entry_point="simuguard_gym.envs.mujoco_scene:MujocoSceneEnv")
if "simuguard_gym/Robosuite-v0" not in registry:
    register(id="simuguard_gym/Robosuite-v0", entry_point="simuguard_gym.envs.robosuite_task:RobosuiteEnv",
             disable_env_checker=True)
