"""Regenerate urdf/so101/so101.urdf and its small meshes from the upstream SO-101 description.

    pip install trimesh fast-simplification    # tools for this script only, not runtime dependencies
    python tools/so101_meshes.py --assets ../shared/data/robots/so101/assets

Reads urdf/so101/so101_new_calib.urdf (upstream, unchanged) and the upstream STL meshes (about 16 MB,
not in the repository), and writes:
- urdf/so101/meshes/visual/<part>.stl: each part simplified (vertex clustering on a 2 mm grid, then
  quadric edge collapse with fast-simplification toward --visual-faces triangles), binary STL, same
  vertex frame as the original (no re-centring), so the URDF's <origin> of every visual stays as upstream wrote it.
- urdf/so101/meshes/collision/<part>.stl: the convex hull of each part clustered on an 8 mm grid
  (PyBullet hulls a moving body's mesh anyway; a hull of few vertices is cheap).
- urdf/so101/so101.urdf: the upstream URDF with mesh paths pointing at those files, plus a fixed camera
  mast and `camera_link` (optical convention) so the sim camera sees the arm, as in urdf/arm6.urdf.
Every change is listed in urdf/so101/SOURCE.md.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import fast_simplification
import numpy as np
import trimesh

REPO = Path(__file__).resolve().parent.parent
SO101 = REPO / "urdf" / "so101"
UPSTREAM_URDF = SO101 / "so101_new_calib.urdf"
SIM_URDF = SO101 / "so101.urdf"

# Camera mast: front-left of the arm on the table, looking back at the workspace. At zero (the middle
# of every range) the SO-101 stretches along +x (tool point at x 0.39 m, z 0.23 m), so its workspace on
# the table is around x 0.15-0.3 m. Optical frame: z forward, x right, y down.
CAMERA_MAST_XYZ = (0.50, 0.25, 0.0)     # [m] mast foot in base_link
CAMERA_HEIGHT_M = 0.35                  # [m] camera above the table
CAMERA_LOOK_AT = (0.18, 0.0, 0.07)      # [m] workspace point the optical axis passes through
# Joint elements in chain order: RobotModel and joint_states list movable joints in URDF element order,
# and upstream writes them tip first (gripper .. shoulder_pan).
CHAIN_ORDER = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper_frame_joint",
               "gripper")


def _optical_rpy(eye: np.ndarray, look_at: np.ndarray) -> tuple[float, float, float]:
    """URDF rpy of an optical frame at `eye` whose z axis points at `look_at` and whose y axis points
    as far down (-z world) as it can."""
    z = look_at - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, [0.0, 0.0, 1.0])  # right = forward x up
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    rot = np.column_stack([x, y, z])
    # rot = Rz(yaw) Ry(pitch) Rx(roll)
    pitch = float(np.arcsin(-rot[2, 0]))
    roll = float(np.arctan2(rot[2, 1], rot[2, 2]))
    yaw = float(np.arctan2(rot[1, 0], rot[0, 0]))
    return roll, pitch, yaw


def _cluster(mesh: trimesh.Trimesh, cell_m: float) -> trimesh.Trimesh:
    """Vertex clustering: every vertex moves to the mean of the vertices in its cubic cell of side
    `cell_m` [m]; triangles that collapse are dropped. CAD tessellations (long thin fans) defeat quadric
    decimation alone (fast-simplification stops at ~25-35% of the faces), clustering first does not."""
    cell = np.floor(mesh.vertices / cell_m).astype(np.int64)
    _, index = np.unique(cell, axis=0, return_inverse=True)
    index = index.reshape(-1)
    points = np.zeros((index.max() + 1, 3))
    np.add.at(points, index, mesh.vertices)
    points /= np.bincount(index)[:, None]
    faces = index[mesh.faces]
    kept = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    out = trimesh.Trimesh(points, faces[kept], process=True)
    out.update_faces(out.unique_faces())
    out.remove_unreferenced_vertices()
    return out


def _decimate(mesh: trimesh.Trimesh, cell_m: float, faces: int) -> trimesh.Trimesh:
    """Clustered on a `cell_m` grid [m], then quadric-decimated toward `faces` triangles."""
    out = _cluster(mesh, cell_m)
    if len(out.faces) > faces:
        points, cells = fast_simplification.simplify(out.vertices, out.faces, target_count=faces)
        out = trimesh.Trimesh(points, cells, process=True)
    out.fix_normals()
    return out


def _camera_xml() -> str:
    eye = np.array([CAMERA_MAST_XYZ[0], CAMERA_MAST_XYZ[1], CAMERA_HEIGHT_M])
    roll, pitch, yaw = _optical_rpy(eye, np.array(CAMERA_LOOK_AT))
    mx, my, mz = CAMERA_MAST_XYZ
    half = CAMERA_HEIGHT_M / 2.0
    return f"""
  <!-- Added by sim2real_ros (tools/so101_meshes.py): a camera mast beside the arm, as in urdf/arm6.urdf -->
  <joint name="camera_mast_joint" type="fixed">
    <parent link="base_link"/>
    <child link="camera_mast"/>
    <origin xyz="{mx} {my} {mz}" rpy="0 0 0"/>
  </joint>
  <link name="camera_mast">
    <inertial>
      <origin xyz="0 0 {half}" rpy="0 0 0"/>
      <mass value="0.3"/>
      <inertia ixx="0.004" ixy="0" ixz="0" iyy="0.004" iyz="0" izz="2e-05"/>
    </inertial>
    <visual>
      <origin xyz="0 0 {half}" rpy="0 0 0"/>
      <geometry><cylinder radius="0.01" length="{CAMERA_HEIGHT_M}"/></geometry>
      <material name="sts3215"/>
    </visual>
  </link>
  <!-- optical frame: z forward toward {CAMERA_LOOK_AT} in base_link, x right, y down -->
  <joint name="camera_joint" type="fixed">
    <parent link="camera_mast"/>
    <child link="camera_link"/>
    <origin xyz="0 0 {CAMERA_HEIGHT_M}" rpy="{roll:.10f} {pitch:.10f} {yaw:.10f}"/>
  </joint>
  <link name="camera_link">
    <inertial>
      <origin xyz="0 0 0" rpy="0 0 0"/>
      <mass value="0.01"/>
      <inertia ixx="1e-6" ixy="0" ixz="0" iyy="1e-6" iyz="0" izz="1e-6"/>
    </inertial>
  </link>
"""


def _sim_urdf(upstream: str) -> str:
    header = ("<!-- so101.urdf: generated by tools/so101_meshes.py from so101_new_calib.urdf (TheRobotStudio/"
              "SO-ARM100, Apache-2.0, see LICENSE and SOURCE.md here). Simplified meshes, camera mast added. -->\n")
    text = re.sub(r"(<visual>.*?<mesh filename=\")assets/", r"\1meshes/visual/", upstream, flags=re.S)
    text = re.sub(r"(<collision>.*?<mesh filename=\")assets/", r"\1meshes/collision/", text, flags=re.S)
    if "assets/" in text:
        raise SystemExit("so101_meshes: a mesh path was not rewritten (upstream layout changed?)")
    # Kinematic joints only (a <transmission>'s <joint name=..> has no type attribute).
    blocks = {m.group(1): m.group(0) for m in re.finditer(r'  <joint name="([^"]+)" type="[^"]+">.*?</joint>\n',
                                                         text, flags=re.S)}
    if sorted(blocks) != sorted(CHAIN_ORDER):
        raise SystemExit(f"so101_meshes: upstream joints {sorted(blocks)} are not {sorted(CHAIN_ORDER)}")
    for block in blocks.values():
        text = text.replace(block, "")
    chain = "\n  <!-- Joints in chain order (moved here by sim2real_ros) -->\n"
    chain += "".join(blocks[n] for n in CHAIN_ORDER)
    text = text.replace("</robot>", chain + _camera_xml() + "</robot>")
    first_line_end = text.index("\n") + 1
    return text[:first_line_end] + header + text[first_line_end:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--assets", required=True, type=Path, help="folder of the upstream STL meshes")
    ap.add_argument("--visual-cell-m", type=float, default=0.002, help="[m] vertex clustering cell, visuals")
    ap.add_argument("--visual-faces", type=int, default=400, help="at most about this many triangles per visual")
    ap.add_argument("--collision-cell-m", type=float, default=0.008, help="[m] vertex clustering cell, hulls")
    args = ap.parse_args()
    upstream = UPSTREAM_URDF.read_text()
    names = sorted(set(re.findall(r'filename="assets/([^"]+\.stl)"', upstream)))
    (SO101 / "meshes" / "visual").mkdir(parents=True, exist_ok=True)
    (SO101 / "meshes" / "collision").mkdir(parents=True, exist_ok=True)
    total = 0
    for name in names:
        original = trimesh.load(args.assets / name, force="mesh")
        visual = _decimate(original, args.visual_cell_m, args.visual_faces)
        hull = _cluster(original, args.collision_cell_m).convex_hull
        for kind, mesh in (("visual", visual), ("collision", hull)):
            path = SO101 / "meshes" / kind / name
            mesh.export(path, file_type="stl")
            total += path.stat().st_size
        print(f"{name}: {len(original.faces)} -> {len(visual.faces)} visual, {len(hull.faces)} hull faces; "
              f"max vertex shift of the bounds "
              f"{np.abs(visual.bounds - original.bounds).max() * 1000:.2f} mm")
    SIM_URDF.write_text(_sim_urdf(upstream))
    print(f"wrote {len(names)} x 2 meshes ({total / 1e6:.2f} MB) and {SIM_URDF.relative_to(REPO)}")


if __name__ == "__main__":
    main()
