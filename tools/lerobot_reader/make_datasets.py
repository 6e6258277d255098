"""Export the datasets the LeRobot reader check reads (run in .venv): a recorded bag with a stretch of
lost images (the case that shifted frame times), and the real G1 dataset round trip when
../shared/data/lerobot is present. Prints each exported folder on its own line."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test"))


def main(out: Path) -> None:
    import test_lerobot as fixtures

    from sim2real_ros.datasets.lerobot import import_dataset
    from sim2real_ros.datasets.lerobot_export import export_bag

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    fixtures._recorded_bag(out / "gap_bag", missing_images=tuple(range(45, 52)))
    export_bag(out / "gap_bag", out / "gap", fps=fixtures.FPS, task="reach", progress=False)
    print(out / "gap")
    if fixtures.G1.is_dir():
        import_dataset(fixtures.G1, out / "g1_bag", progress=False)
        export_bag(out / "g1_bag", out / "g1", fps=30, progress=False)
        print(out / "g1")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
