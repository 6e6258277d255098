"""Training curves: TensorBoard event files and a PNG summary in a run's work directory.

`TrainingLog(work_dir)` writes scalars through torch's SummaryWriter (tensorboard's event format:
`tensorboard --logdir WORK_DIR/tensorboard`) and keeps them, so `close()` can draw every series in
one PNG (matplotlib, headless) beside them: `WORK_DIR/curves.png`. Names are "group/name"
(e.g. "train/success", "loss/surrogate", "reward/distance", "perf/steps_per_s", "train/learning_rate").
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

TENSORBOARD_DIR = "tensorboard"
SUMMARY_PNG = "curves.png"
_MAX_PANELS = 16  # the PNG stays readable; every series is in the event files all the same


class TrainingLog:
    """Scalars of one training run: `add(step, {"group/name": value})`, then `close()`."""

    def __init__(self, work_dir: str | Path, title: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.work_dir = Path(work_dir)
        self.title = title
        self.event_dir = self.work_dir / TENSORBOARD_DIR
        self.png_path = self.work_dir / SUMMARY_PNG
        self._writer = SummaryWriter(log_dir=str(self.event_dir))
        self._series: dict[str, list[tuple[int, float]]] = {}

    def add(self, step: int, scalars: dict[str, Any]) -> None:
        """Record finite numeric values at `step` (the x axis: env steps or epochs); None and
        non-finite values are left out (a success rate before the first episode, say)."""
        for name, value in scalars.items():
            if value is None or isinstance(value, bool):
                continue
            value = float(value)
            if not math.isfinite(value):
                continue
            self._writer.add_scalar(name, value, int(step))
            self._series.setdefault(name, []).append((int(step), value))

    def close(self) -> dict[str, str]:
        """Flush the event files and draw the PNG. Returns {"tensorboard": dir, "png": file}."""
        self._writer.flush()
        self._writer.close()
        self._draw()
        return {"tensorboard": str(self.event_dir), "png": str(self.png_path)}

    def _draw(self) -> None:
        import matplotlib

        matplotlib.use("Agg")  # headless: no display needed on a training machine
        import matplotlib.pyplot as plt

        names = sorted(self._series)[:_MAX_PANELS]
        columns = min(4, max(1, len(names)))
        rows = max(1, math.ceil(len(names) / columns))
        figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 2.8 * rows), squeeze=False)
        for ax in axes.flat:
            ax.set_visible(False)
        for ax, name in zip(axes.flat, names, strict=False):
            steps, values = zip(*self._series[name], strict=True)
            ax.set_visible(True)
            ax.plot(steps, values, marker="." if len(steps) < 30 else None)
            ax.set_title(name, fontsize=9)
            ax.grid(alpha=0.3)
        if not names:
            axes.flat[0].set_visible(True)
            axes.flat[0].text(0.5, 0.5, "no scalars recorded", ha="center", va="center")
        figure.suptitle(self.title)
        figure.tight_layout()
        self.png_path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(self.png_path, dpi=80)
        plt.close(figure)
