"""Where the package's data (config/, urdf/, launch/, policies/) lives: source tree or install."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PACKAGE = "sim2real_ros"


@lru_cache(maxsize=1)
def share_dir() -> Path:
    """Directory holding config/, urdf/, launch/, policies/.

    In a source checkout or editable pip install that is the repository root; in a colcon
    install it is share/sim2real_ros found through the ament index.
    """
    repo_root = Path(__file__).resolve().parent.parent
    if (repo_root / "package.xml").is_file() and (repo_root / "config").is_dir():
        return repo_root
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory(PACKAGE))
    except Exception as err:  # noqa: BLE001 - any lookup failure means the same thing
        raise FileNotFoundError(
            f"cannot find the {PACKAGE} share directory (not a source tree, not in the ament index)"
        ) from err


def config_path(name: str) -> Path:
    """Path of a file under config/."""
    return share_dir() / "config" / name


def urdf_path(name: str = "arm6.urdf") -> Path:
    """Path of a URDF under urdf/ (default: the project's 6-joint desktop arm)."""
    return share_dir() / "urdf" / name


def default_policy_path() -> Path:
    """The policy shipped with the repository (trained by `sim2real train`, see README)."""
    return share_dir() / "policies" / "reach_default.safetensors"


# ROS 2 distributions on Fast DDS 2.x (Humble, Iron, Jazzy); Kilted and newer run Fast DDS 3.
FAST_DDS_2_DISTROS = ("humble", "iron", "jazzy")


def fast_dds_major(environ: dict | None = None) -> int:
    """The major version of the Fast DDS this process runs (2 or 3): ROS_DISTRO where set (a sourced
    install), else the installed wheel's version (ros-fastdds 3.x, ros-fastrtps 2.x), else 3. Their
    XML profiles name some elements differently (heartbeatPeriod / heartbeat_period)."""
    import os
    from importlib import metadata

    env = os.environ if environ is None else environ
    distro = str(env.get("ROS_DISTRO", "")).strip().lower()
    if distro:
        return 2 if distro in FAST_DDS_2_DISTROS else 3
    for package in ("ros-fastdds", "ros-fastrtps"):
        try:
            return int(metadata.version(package).split(".")[0])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return 3


def dds_profile_path(environ: dict | None = None) -> Path:
    """Fast DDS profile that delivers camera-sized best-effort messages and repairs a lost reliable
    sample within 20 ms: config/fastdds_large_images.xml for Fast DDS 3 (Kilted and newer),
    config/fastdds2_large_images.xml for Fast DDS 2 (Humble, Jazzy): the same settings in each
    version's element names (fast_dds_major)."""
    name = "fastdds2_large_images.xml" if fast_dds_major(environ) == 2 else "fastdds_large_images.xml"
    return share_dir() / "config" / name


def use_dds_profile(environ: dict | None = None) -> None:
    """Select the large-image Fast DDS profile unless the user chose one. Must run before the first
    DDS participant of the process exists (and is inherited by the processes it starts)."""
    import os

    env = os.environ if environ is None else environ
    if not env.get("FASTDDS_DEFAULT_PROFILES_FILE") and not env.get("FASTRTPS_DEFAULT_PROFILES_FILE"):
        # Fast DDS 2 (Humble, Jazzy) reads only the old name (measured on Jazzy's 2.14: a profile named
        # by FASTDDS_DEFAULT_PROFILES_FILE was never read); Fast DDS 3 warns about the old name.
        old = fast_dds_major(env) == 2
        name = "FASTRTPS_DEFAULT_PROFILES_FILE" if old else "FASTDDS_DEFAULT_PROFILES_FILE"
        env[name] = str(dds_profile_path(env))
