"""Stage 1 of RigPI: an initial theta and the box C it must stay in.

A prior provider is any callable ``provider(problem, first_pose) -> Prior``. Two are built in:
:class:`GeometryPrior` (offline: geometry and a material density table) and :class:`VlmPrior`
(a vision-language model behind a callable you supply; nothing here calls a network).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from simuguard_gym.identify import materials, pose
from simuguard_gym.identify.inertia import shift, to_entries
from simuguard_gym.identify.problem import Problem
from simuguard_gym.identify.shapes import mass_properties, parse_shape


@dataclass(frozen=True)
class Prior:
    """theta0 and the bounds C = [lower, upper], one entry per parameter name."""

    names: tuple[str, ...]
    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    source: str = "geometry"

    def __post_init__(self) -> None:
        n = len(self.names)
        for field_name in ("value", "lower", "upper"):
            a = np.asarray(getattr(self, field_name), float)
            if a.shape != (n,) or not np.isfinite(a).all():
                raise ValueError(f"prior {field_name} must be {n} finite numbers, got {a}")
            object.__setattr__(self, field_name, a)
        if np.any(self.lower >= self.upper):
            bad = [nm for nm, lo, hi in zip(self.names, self.lower, self.upper) if lo >= hi]
            raise ValueError(f"prior bounds are empty for {bad}")

    @property
    def scale(self) -> np.ndarray:
        """The size of each parameter: what 'a step of 1/100' and relative errors refer to."""
        width = (self.upper - self.lower) / 2
        scale = np.maximum(np.abs(self.value), 0.1 * width)
        # products of inertia are measured against the tensor's size, not their own (often ~0)
        diag = [i for i, n in enumerate(self.names) if n in ("ixx", "iyy", "izz")]
        for i, n in enumerate(self.names):
            if n in ("ixy", "ixz", "iyz") and diag:
                scale[i] = float(np.mean(scale[diag]))
        return scale

    def start(self, **values: float) -> "Prior":
        """The same bounds with another starting point (e.g. a deliberately poor guess)."""
        v = self.value.copy()
        for k, x in values.items():
            v[self.names.index(k)] = x
        return replace(self, value=np.clip(v, self.lower, self.upper))

    def widen(self, **bounds: tuple[float, float]) -> "Prior":
        lo, hi = self.lower.copy(), self.upper.copy()
        for k, (a, b) in bounds.items():
            i = self.names.index(k)
            lo[i], hi[i] = a, b
        return replace(self, lower=lo, upper=hi, value=np.clip(self.value, lo, hi))

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "names": list(self.names), "value": self.value.tolist(),
                "lower": self.lower.tolist(), "upper": self.upper.tolist()}


#: a link's damping prior, as the time its speed takes to decay by e (inertia / damping)
DECAY_TYPICAL_S, DECAY_SHORTEST_S = 0.5, 0.01


class GeometryPrior:
    """The offline prior: uniform density over the body's shapes, density and friction from a table.

    Example:
        >>> from simuguard_gym.identify import GeometryPrior, Problem, Shape
        >>> problem = Problem(shapes=(Shape("box", (0.02, 0.02, 0.02)),))
        >>> prior = GeometryPrior(material="pla")(problem)
        >>> round(float(prior.value[0]), 4)   # 8 cm^3 of PLA at typical infill
        0.008
    """

    def __init__(self, material: str | None = None, density: float | Sequence[float] | None = None,
                 friction: Sequence[float] | None = None) -> None:
        if density is None:
            self.density = materials.density(material)
        elif np.isscalar(density):
            d = float(density)
            self.density = (0.7 * d, d, 1.3 * d)
        else:
            self.density = tuple(float(x) for x in density)
        if not (len(self.density) == 3 and 0 < self.density[0] <= self.density[1] <= self.density[2]):
            raise ValueError(f"density must be (low, typical, high) with 0 < low <= typical <= high, got {self.density}")
        self.friction = tuple(friction) if friction is not None else materials.friction(material)
        self.material = material

    def __call__(self, problem: Problem, first_pose: np.ndarray | None = None) -> Prior:
        props = mass_properties(problem.shapes)
        lo_d, d, hi_d = self.density
        v = props.volume
        m = np.array([lo_d * v, d * v, hi_d * v])
        i_unit = props.inertia_per_density
        reach = float(np.linalg.norm(props.half_extent))
        if problem.joint is None:
            diag = np.diag(i_unit)
            # |I_xy| < sqrt(I_xx I_yy) for any valid tensor; half the typical largest moment is ample
            off_limit = 0.5 * d * float(diag.max())
            value = [m[1], *props.centroid, *to_entries(d * i_unit)]
            # hollow bodies carry up to 5/3 of the solid inertia per mass, concentrated ones much less
            lower = [m[0], *-props.half_extent, *(0.2 * lo_d * diag), -off_limit, -off_limit, -off_limit]
            upper = [m[2], *props.half_extent, *(2.5 * hi_d * diag), off_limit, off_limit, off_limit]
            if "mu" in problem.names:
                value.append(self.friction[1])
                lower.append(self.friction[0])
                upper.append(self.friction[2])
            return Prior(problem.names, np.array(value), np.array(lower), np.array(upper), "geometry")
        g = float(np.linalg.norm(problem.gravity)) or 9.81
        if problem.joint.kind == "prismatic":
            # rails: a few percent of the weight typically, up to the whole weight when stiff;
            # damping as the time the link's speed takes to decay (inertia / damping): 0.5 s
            # typically, down to 10 ms for a heavily damped soft-close
            return Prior(problem.names, np.array([m[1], 0.1 * m[1] * g, m[1] / DECAY_TYPICAL_S]),
                         np.array([m[0], 0.0, 0.0]), np.array([m[2], m[2] * g, m[2] / DECAY_SHORTEST_S]), "geometry")
        axis_b, anchor_b = _joint_in_body(problem, first_pose)
        hinge = float(axis_b @ shift(i_unit, v, props.centroid - anchor_b) @ axis_b)
        lever = float(np.linalg.norm(np.cross(axis_b, props.centroid - anchor_b)))
        arm = max(lever, reach)
        value, lower, upper = [d * hinge], [0.2 * lo_d * hinge], [2.5 * hi_d * hinge]
        if "gravity_moment" in problem.names:
            value.append(m[1] * lever)
            lower.append(0.0)
            upper.append(m[2] * arm)
        value += [0.05 * m[1] * g * arm, value[0] / DECAY_TYPICAL_S]
        lower += [0.0, 0.0]
        upper += [m[2] * g * arm, upper[0] / DECAY_SHORTEST_S]
        return Prior(problem.names, np.array(value), np.array(lower), np.array(upper), "geometry")


def _joint_in_body(problem: Problem, first_pose: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The joint axis and anchor in the body frame at the first sample."""
    if first_pose is None:
        first_pose = np.array([0, 0, 0, 1, 0, 0, 0], float)
    r = pose.to_matrix(first_pose[3:7])
    return r.T @ np.asarray(problem.joint.axis), r.T @ (np.asarray(problem.joint.anchor) - first_pose[:3])


#: the prompt a VlmPrior sends with the images; the answer must follow VLM_SCHEMA
VLM_PROMPT = """You see a rigid object that a robot will manipulate. Estimate its physical properties.
Answer with one JSON object and nothing else, with these keys:
  "material": the main material, one word (e.g. "pla", "wood", "steel", "fruit"),
  "density_kg_m3": [low, typical, high] of the object as a whole (hollow parts count as air),
  "friction": [low, typical, high] Coulomb coefficient against a table top,
  "shape": one of "box", "sphere", "cylinder", "ellipsoid",
  "dimensions_m": the shape's sizes in metres: box = full edge lengths [x, y, z];
                  sphere = [radius]; cylinder = [radius, height]; ellipsoid = [semi-axes x, y, z].
Description: {description}"""

VLM_SCHEMA = {
    "type": "object",
    "required": ["density_kg_m3"],
    "properties": {
        "material": {"type": "string"},
        "density_kg_m3": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
        "friction": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
        "shape": {"enum": ["box", "sphere", "cylinder", "ellipsoid"]},
        "dimensions_m": {"type": "array", "items": {"type": "number"}},
    },
}


class VlmPrior:
    """The RigPI prior: a vision-language model reads images and returns material, density and size.

    ``ask(images, prompt) -> str`` is yours (Gemini, Intern-S1, a local model...); it receives
    :data:`VLM_PROMPT` with the description filled in and must return JSON per :data:`VLM_SCHEMA`.
    The answer's density and friction ranges then seed a :class:`GeometryPrior`; its shape and
    dimensions are used when the problem has no geometry of its own.

    Example:
        >>> from simuguard_gym.identify import Problem, Shape, VlmPrior
        >>> ask = lambda images, prompt: '{"material": "pla", "density_kg_m3": [400, 1100, 1300], ' \\
        ...     '"friction": [0.2, 0.4, 0.7], "shape": "box", "dimensions_m": [0.02, 0.02, 0.02]}'
        >>> prior = VlmPrior(ask, images=[], description="a printed cube")(Problem(shapes=()))
        >>> round(float(prior.value[0]), 4)
        0.0088
    """

    def __init__(self, ask: Callable[[Sequence[Any], str], str], images: Sequence[Any] = (),
                 description: str = "") -> None:
        self.ask, self.images, self.description = ask, list(images), description
        self.answer: dict[str, Any] | None = None

    def __call__(self, problem: Problem, first_pose: np.ndarray | None = None) -> Prior:
        answer = parse_vlm_answer(self.ask(self.images, VLM_PROMPT.format(description=self.description)))
        self.answer = answer
        if not problem.shapes:
            if "shape" not in answer or "dimensions_m" not in answer:
                raise ValueError("the problem has no geometry and the VLM answer gives no shape/dimensions_m")
            shape = parse_shape(answer["shape"] + ":" + ",".join(str(x) for x in answer["dimensions_m"]))
            problem = replace(problem, shapes=(shape,))
        inner = GeometryPrior(material=None, density=answer["density_kg_m3"], friction=answer.get("friction"))
        return replace(inner(problem, first_pose), source="vlm")


def parse_vlm_answer(text: str | dict) -> dict[str, Any]:
    """The VLM's JSON answer, checked against VLM_SCHEMA (a clear error names what is wrong)."""
    if isinstance(text, dict):
        answer = text
    else:
        s = str(text).strip()
        if s.startswith("```"):
            s = s.strip("`").partition("\n")[2]
        try:
            answer = json.loads(s[s.find("{"): s.rfind("}") + 1])
        except ValueError as e:
            raise ValueError(f"the VLM answer is not JSON: {str(text)[:200]!r}") from e
    for key in ("density_kg_m3", "friction"):
        if key in answer:
            r = answer[key]
            if (not isinstance(r, (list, tuple)) or len(r) != 3 or not all(isinstance(x, (int, float)) for x in r)
                    or not 0 <= r[0] <= r[1] <= r[2] or (key == "density_kg_m3" and r[0] <= 0)):
                raise ValueError(f"VLM answer {key} must be [low, typical, high], ascending and positive; got {r!r}")
        elif key == "density_kg_m3":
            raise ValueError("the VLM answer has no density_kg_m3")
    if "shape" in answer and answer["shape"] not in VLM_SCHEMA["properties"]["shape"]["enum"]:
        raise ValueError(f"VLM answer shape {answer['shape']!r} is not one of box, sphere, cylinder, ellipsoid")
    return answer
