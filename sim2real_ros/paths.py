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


def dds_profile_path() -> Path:
    """Fast DDS profile that delivers camera-sized best-effort messages (config/fastdds_large_images.xml)."""
    return share_dir() / "config" / "fastdds_large_images.xml"


def use_dds_profile(environ: dict | None = None) -> None:
    """Select the large-image Fast DDS profile unless the user chose one. Must run before the first
    DDS participant of the process exists (and is inherited by the processes it starts)."""
    import os

    env = os.environ if environ is None else environ
    if not env.get("FASTDDS_DEFAULT_PROFILES_FILE") and not env.get("FASTRTPS_DEFAULT_PROFILES_FILE"):
        # Humble's Fast DDS 2 reads the old name; newer ones warn about it, so set only the one that applies.
        humble = env.get("ROS_DISTRO") == "humble"
        name = "FASTRTPS_DEFAULT_PROFILES_FILE" if humble else "FASTDDS_DEFAULT_PROFILES_FILE"
        env[name] = str(dds_profile_path())
