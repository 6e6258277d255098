"""Read a LeRobot dataset frame by frame with LeRobot's own reader (run in .venv-lerobot).

Usage: python read_dataset.py DATASET_DIR [DATASET_DIR ...]
Prints "<dir>: N of N frames load" per dataset; exits 1 naming the first frame that does not load.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: never reach a hub


def main(argv: list[str]) -> int:
    from ledataset.datasets.lerobot_dataset import LeRobotDataset

    status = 0
    for root in argv:
        dataset = LeRobotDataset("local/sim2real_export", root=root, video_backend="torchcodec")
        loaded = 0
        for index in range(len(dataset)):
            try:
                dataset[index]
            except Exception as error:  # noqa: BLE001 - report LeRobot's own failure, whatever it is
                print(f"{root}: frame {index} of {len(dataset)} does not load: {type(error).__name__}: {error}")
                status = 1
                break
            loaded += 1
        print(f"{root}: {loaded} of {len(dataset)} frames load")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
