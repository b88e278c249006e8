"""The policy protocol of ``simuguard audit``: ``reset(info)`` and ``act(observation, info)``.

Vision-language-action policies keep state across the steps of an episode (an action-chunk
queue, a history of frames) and read the task's instruction. The audit calls ``reset(info)`` at
the start of every episode (``info`` holds ``instruction`` where the env has one, and ``seed``)
and ``act(observation, info)`` at every step that needs an action; ``act`` returns one action, or
a chunk of actions (one more leading axis) that the audit plays out one per step before asking
again. A chunk is dropped at reset. Over N envs side by side (``--num-envs N``) a policy gets the
batch: ``act`` receives the observations batched as Gymnasium's vector envs batch them and a
list of the N infos, and returns N actions or N chunks of one length; ``reset(info)`` is told
which env starts (``info["env_index"]``).

A policy is named as ``MODULE:NAME`` or ``FILE.py:NAME`` (the current directory is importable):
a class (instantiated with no arguments), an object with ``act``, or a plain function of the
observation; ``sb3:MODEL.zip`` loads a Stable-Baselines3 model; ``scripted`` is the built-in
tasks' expert.

>>> import numpy as np
>>> class Hold:
...     def reset(self, info): self.instruction = info.get("instruction")
...     def act(self, observation, info): return np.zeros((3, 2))   # a chunk of 3 actions
>>> player = ChunkPlayer(Hold(), action_shape=(2,))
>>> player.reset({"instruction": "put the bowl on the plate"})
>>> [player.act(None, {}).shape for _ in range(4)], player.calls
([(2,), (2,), (2,), (2,)], 2)
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from simuguard_gym.import_spec import load_object


@runtime_checkable
class Policy(Protocol):
    """What ``simuguard audit`` evaluates (see the module docstring)."""

    def reset(self, info: dict[str, Any]) -> None: ...

    def act(self, observation: Any, info: dict[str, Any]) -> Any: ...


class FunctionPolicy:
    """A plain function of the observation as a :class:`Policy`."""

    def __init__(self, function: Callable[[Any], Any]) -> None:
        self.function = function

    def reset(self, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: Any, info: dict[str, Any]) -> Any:
        return self.function(observation)


class ScriptedPolicy:
    """The expert of simuguard's built-in tasks (their ``expert_action()``)."""

    def __init__(self, env: Any) -> None:
        expert = getattr(env.unwrapped, "expert_action", None)
        if expert is None:
            raise ValueError("--policy scripted needs an env with expert_action() (the built-in tasks)")
        self.expert = expert

    def reset(self, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: Any, info: dict[str, Any]) -> Any:
        return self.expert()


class SB3Policy:
    """A Stable-Baselines3 model, deterministic; with ``vecnormalize`` (the ``VecNormalize``
    statistics saved with it, a ``.pkl``) the observations are normalised as in its training."""

    def __init__(self, path: str, vecnormalize: str | None = None) -> None:
        try:
            from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
        except ImportError:
            raise ValueError("--sb3 needs stable-baselines3: pip install 'simuguard-gym[sb3]'") from None
        for algorithm in (PPO, SAC, TD3, A2C, DDPG, DQN):
            try:
                self.model = algorithm.load(path, device="cpu")
                break
            except Exception:  # noqa: BLE001 - try the next algorithm
                continue
        else:
            raise ValueError(f"cannot load an SB3 model from {path}")
        self.normalize: Any = None
        if vecnormalize is not None:
            self.normalize = _vecnormalize(vecnormalize)

    def reset(self, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: Any, info: dict[str, Any]) -> Any:
        if self.normalize is not None:
            observation = self.normalize.normalize_obs(observation)
        return self.model.predict(observation, deterministic=True)[0]


def _vecnormalize(path: str) -> Any:
    """SB3's ``VecNormalize`` saved with ``save(path)``, frozen (its statistics no longer updated).
    The user names the file, as they name the model: like ``VecNormalize.load``, it is unpickled."""
    import pickle

    from stable_baselines3.common.vec_env import VecNormalize

    try:
        with open(path, "rb") as file:
            found = pickle.load(file)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as error:
        raise ValueError(f"cannot load VecNormalize statistics from {path}: {error}") from None
    if not isinstance(found, VecNormalize):
        raise ValueError(f"{path} holds a {type(found).__name__}, not SB3's VecNormalize statistics")
    found.training = False
    return found


def load_policy(spec: str, env: Any = None, vecnormalize: str | None = None) -> Policy:
    """The :class:`Policy` a spec names (see the module docstring); ``env`` for ``scripted``,
    ``vecnormalize`` for an ``sb3:`` model trained under VecNormalize."""
    if spec == "scripted":
        if env is None:
            raise ValueError("--policy scripted acts through an env's expert_action(): give the env")
        return ScriptedPolicy(env)
    if spec.startswith("sb3:"):
        return SB3Policy(spec[4:], vecnormalize)
    if ":" not in spec:
        raise ValueError(f"--policy must be 'scripted', 'sb3:MODEL.zip', MODULE:NAME or FILE.py:NAME, got {spec!r}")
    target = load_object(spec, "policy")
    if isinstance(target, type):
        try:
            target = target()
        except Exception as error:  # noqa: BLE001 - the user's constructor: said in one line
            raise ValueError(f"the policy class {spec} could not be built with no arguments: "
                             f"{type(error).__name__}: {error}") from None
    if isinstance(target, Policy):
        return target
    if callable(getattr(target, "act", None)):
        return _WithoutReset(target)
    if callable(target):
        return FunctionPolicy(target)
    raise ValueError(f"the policy {spec} is neither a Policy (reset/act), an object with act(), nor a function")


class _WithoutReset:
    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def reset(self, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: Any, info: dict[str, Any]) -> Any:
        return self.policy.act(observation, info)


class ChunkPlayer:
    """Plays a policy's action chunks out one action per step (see the module docstring).

    ``action_shape`` is one action's shape: an answer with one more leading axis is a chunk.
    """

    def __init__(self, policy: Policy, action_shape: tuple[int, ...]) -> None:
        self.policy = policy
        self.action_shape = tuple(action_shape)
        self.queue: deque[np.ndarray] = deque()
        self.calls = 0

    def reset(self, info: dict[str, Any]) -> None:
        self.queue.clear()
        self.policy.reset(info)

    def act(self, observation: Any, info: dict[str, Any]) -> Any:
        if not self.queue:
            self.calls += 1
            answer = self.policy.act(observation, info)
            array = np.asarray(answer)
            if self.action_shape and array.ndim == len(self.action_shape) + 1 \
                    and array.shape[1:] == self.action_shape:
                if len(array) == 0:
                    raise ValueError("the policy returned an empty chunk of actions")
                self.queue.extend(array)
            else:
                return answer
        return self.queue.popleft()


class BatchChunkPlayer:
    """:class:`ChunkPlayer` over a vector env: N actions, or N chunks, per call."""

    def __init__(self, policy: Policy, action_shape: tuple[int, ...], n: int) -> None:
        self.policy, self.action_shape, self.n = policy, tuple(action_shape), int(n)
        self.queues: list[deque[np.ndarray]] = [deque() for _ in range(self.n)]

    def reset(self, index: int, info: dict[str, Any]) -> None:
        self.queues[index].clear()
        self.policy.reset({**info, "env_index": index})

    def act(self, observations: Any, infos: list[dict[str, Any]]) -> np.ndarray:
        if any(not q for q in self.queues):
            array = np.asarray(self.policy.act(observations, infos))
            if array.shape[:1] != (self.n,):
                raise ValueError(f"over {self.n} envs the policy must return {self.n} actions or chunks, "
                                 f"got shape {array.shape}")
            chunked = array.ndim == len(self.action_shape) + 2
            for queue, row in zip(self.queues, array):
                queue.clear()  # every env acts on the same call's answer
                queue.extend(row if chunked else row[None])
        return np.stack([q.popleft() for q in self.queues])
