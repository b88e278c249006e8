"""Built-in envs, registered with Gymnasium on import of ``simuguard_gym.envs``.

Envs of optional engines register by entry point only: ``gym.make`` imports the engine then.
"""

from gymnasium.envs.registration import register, registry

from simuguard_gym.envs.mujoco_scene import MujocoSceneEnv

__all__ = ["MujocoSceneEnv"]

_ENVS = {
    "simuguard_gym/MujocoScene-v0": dict(entry_point="simuguard_gym.envs.mujoco_scene:MujocoSceneEnv"),
    "simuguard_gym/Robosuite-v0": dict(entry_point="simuguard_gym.envs.robosuite_task:RobosuiteEnv",
                                       disable_env_checker=True),
    "simuguard_gym/Libero-v0": dict(entry_point="simuguard_gym.envs.libero_task:LiberoEnv",
                                    disable_env_checker=True),
    "simuguard_gym/PlaceCanBasket-v0": dict(entry_point="simuguard_gym.envs.place_can_basket:PlaceCanBasketEnv",
                                            max_episode_steps=90),
    "simuguard_gym/PlaceCanBasket-MuJoCo-v0": dict(
        entry_point="simuguard_gym.envs.place_can_basket_mujoco:PlaceCanBasketMujocoEnv", max_episode_steps=90),
    # the same task on the decomposed meshes (envs/decomposed_geometry.py: CoACD, 22 + 54 pieces)
    "simuguard_gym/PlaceCanBasketDecomposed-v0": dict(
        entry_point="simuguard_gym.envs.place_can_basket:PlaceCanBasketEnv", max_episode_steps=90,
        kwargs={"geometry": "decomposed"}),
    "simuguard_gym/PlaceCanBasketDecomposed-MuJoCo-v0": dict(
        entry_point="simuguard_gym.envs.place_can_basket_mujoco:PlaceCanBasketMujocoEnv", max_episode_steps=90,
        kwargs={"geometry": "decomposed"}),
    "simuguard_gym/DropInBin-v0": dict(entry_point="simuguard_gym.envs.negatives:DropInBinEnv", max_episode_steps=50),
    "simuguard_gym/ShoveBasket-v0": dict(entry_point="simuguard_gym.envs.negatives:ShoveBasketEnv",
                                         max_episode_steps=60),
}
for _id, _kwargs in _ENVS.items():
    if _id not in registry:
        register(id=_id, **_kwargs)
