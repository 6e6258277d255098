"""The URDF's visuals as Foxglove 3D primitives, one scene entity per link, locked to its frame.

Foxglove's 3D panel draws a URDF itself only from a URL, a parameter or a ROS topic it knows;
primitives attached to the link frames draw everywhere (live, MCAP, any Foxglove version). Boxes,
cylinders and spheres are drawn; mesh visuals are left out and counted (`skipped_meshes`).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from ..core.errors import UrdfError
from ..core.robot.urdf import parse_floats

DEFAULT_RGBA = (0.7, 0.7, 0.72, 1.0)


@dataclass(frozen=True)
class Visual:
    """One URDF <visual>: shape ('box' | 'cylinder' | 'sphere'), size (3,) [m] (box edges; cylinder
    diameter, diameter, length; sphere diameter x3), origin in the link frame, RGBA colour."""

    link: str
    shape: str
    size: tuple[float, float, float]
    xyz: tuple[float, float, float]
    rpy: tuple[float, float, float]
    rgba: tuple[float, float, float, float]


@dataclass
class RobotVisuals:
    visuals: list[Visual] = field(default_factory=list)
    skipped_meshes: int = 0


def parse_visuals(urdf_xml: str, source: str = "robot_description") -> RobotVisuals:
    """Every link's <visual> elements of a URDF XML string; UrdfError names the link when malformed."""
    try:
        root = ET.fromstring(urdf_xml)
    except ET.ParseError as err:
        raise UrdfError(f"{source}: not valid XML: {err}") from err
    materials = {}
    for mat in root.findall("material"):
        color = mat.find("color")
        if color is not None:
            materials[mat.get("name", "")] = parse_floats(color.get("rgba"), DEFAULT_RGBA, f"{source}: material")
    out = RobotVisuals()
    for link in root.findall("link"):
        name = link.get("name", "")
        where = f"{source}: link '{name}' visual"
        for visual in link.findall("visual"):
            origin = visual.find("origin")
            xyz = parse_floats(origin.get("xyz") if origin is not None else None, (0.0, 0.0, 0.0), where)
            rpy = parse_floats(origin.get("rpy") if origin is not None else None, (0.0, 0.0, 0.0), where)
            rgba = DEFAULT_RGBA
            mat = visual.find("material")
            if mat is not None:
                color = mat.find("color")
                rgba = (parse_floats(color.get("rgba"), DEFAULT_RGBA, where) if color is not None
                        else materials.get(mat.get("name", ""), DEFAULT_RGBA))
            geometry = visual.find("geometry")
            if geometry is None or len(geometry) == 0:
                raise UrdfError(f"{where}: <visual> without <geometry>")
            shape = geometry[0]
            if shape.tag == "box":
                size = parse_floats(shape.get("size"), (0.0, 0.0, 0.0), where)
            elif shape.tag == "cylinder":
                r = parse_floats(shape.get("radius"), (0.0,), where)[0]
                length = parse_floats(shape.get("length"), (0.0,), where)[0]
                size = (2 * r, 2 * r, length)
            elif shape.tag == "sphere":
                d = 2 * parse_floats(shape.get("radius"), (0.0,), where)[0]
                size = (d, d, d)
            elif shape.tag == "mesh":
                out.skipped_meshes += 1
                continue
            else:
                raise UrdfError(f"{where}: unknown geometry <{shape.tag}>")
            out.visuals.append(Visual(name, shape.tag, size, xyz, rpy, rgba))
    return out
