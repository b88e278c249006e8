"""Densities and friction coefficients of common materials: the offline prior's table.

Each entry is (low, typical, high). Densities are of the object as made (3D prints at usual
infill, wood with grain, fruit with water), not of the raw material, because the prior's job is
to bracket what a robot meets; friction is against a typical table top (wood, laminate, steel).
"""

from __future__ import annotations

DENSITY_KG_M3: dict[str, tuple[float, float, float]] = {
    "pla": (300.0, 1000.0, 1300.0),        # printed at 15-100 % infill; solid PLA is 1240
    "abs": (250.0, 850.0, 1100.0),
    "wood": (350.0, 600.0, 900.0),
    "mdf": (600.0, 750.0, 850.0),
    "aluminium": (2600.0, 2700.0, 2800.0),
    "steel": (7750.0, 7850.0, 8050.0),
    "glass": (2400.0, 2500.0, 2800.0),
    "rubber": (900.0, 1200.0, 1500.0),
    "foam": (20.0, 50.0, 200.0),
    "cardboard": (50.0, 150.0, 700.0),     # a closed box is mostly air
    "fruit": (750.0, 850.0, 1100.0),       # apples float: ~0.8
    "water": (990.0, 1000.0, 1010.0),
    "plastic": (300.0, 950.0, 1400.0),
}

FRICTION: dict[str, tuple[float, float, float]] = {
    "pla": (0.15, 0.35, 0.7),
    "abs": (0.15, 0.35, 0.7),
    "wood": (0.2, 0.4, 0.7),
    "mdf": (0.2, 0.4, 0.7),
    "aluminium": (0.15, 0.4, 1.1),
    "steel": (0.1, 0.4, 0.8),
    "glass": (0.1, 0.4, 0.9),
    "rubber": (0.5, 0.9, 1.5),
    "foam": (0.3, 0.6, 1.2),
    "cardboard": (0.2, 0.45, 0.8),
    "fruit": (0.2, 0.45, 0.9),
    "water": (0.05, 0.3, 1.0),
    "plastic": (0.15, 0.35, 0.8),
}

#: when nothing is known: from balsa to steel, from ice-like to rubber
UNKNOWN_DENSITY = (50.0, 1000.0, 8000.0)
UNKNOWN_FRICTION = (0.05, 0.5, 1.5)


def density(material: str | None) -> tuple[float, float, float]:
    if material is None:
        return UNKNOWN_DENSITY
    try:
        return DENSITY_KG_M3[material.lower()]
    except KeyError:
        raise ValueError(f"unknown material {material!r}; known: {', '.join(sorted(DENSITY_KG_M3))} "
                         "(or give a density)") from None


def friction(material: str | None) -> tuple[float, float, float]:
    if material is None:
        return UNKNOWN_FRICTION
    return FRICTION.get(material.lower(), UNKNOWN_FRICTION)
