"""policy_node's image ledger and its report arithmetic (no ROS; the node holds a lock around calls).

Every image is accounted for exactly once, in every report:

    images_received = chunks_published + image drops (stale, unpaired, superseded, throttled,
                      bad_image, inference_error) + observations_waiting

where observations_waiting (0 or 1 each) counts the image held for its joint state (`pending`) and
the one in inference. Each call below changes the counts and the waiting state in one step, so a
report taken between two calls always balances. Durations are [ms].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from ..control.observation_pairing import DropCounter, DropReason, RollingStats
from ..report import Level

T = TypeVar("T")

# Drops that are images (each image_* call counts the image once); bad_joint_state is not one.
IMAGE_DROPS = tuple(reason for reason in DropReason if reason is not DropReason.BAD_JOINT_STATE)


@dataclass(frozen=True)
class PolicyReport:
    """One diagnostics report: level, message and the ledger's values (in report order)."""

    level: Level
    message: str
    values: dict[str, int | str]


class ImageLedger(Generic[T]):
    """Counts of images, joint states and chunks, drops by reason, timing statistics, and the
    observation (T: whatever the node holds for one) waiting for its joint state."""

    def __init__(self) -> None:
        self.drops = DropCounter()
        self.images_received = 0
        self.joint_states_received = 0
        self.chunks_published = 0
        self.chunks_inline = 0  # of chunks_published, those inferred in the image callback (no hand-off)
        self.pending: T | None = None  # the image held until its joint state is there
        self.in_inference = False  # an observation taken from `pending` whose outcome is not counted yet
        self.inference_ms = RollingStats()
        self.obs_to_chunk_ms = RollingStats()
        # image stamp -> its callback in the node [ms]: capture and transport, before any of the
        # node's work (obs_to_chunk minus this is the node's own share)
        self.obs_to_receipt_ms = RollingStats()
        # its callback -> the policy called on it [ms]: preprocessing, the hand-off to the inference
        # thread, reading the joint states and pairing (the node's share before inference)
        self.receipt_to_inference_ms = RollingStats()
        self.pairing_offset_ms = RollingStats()  # image stamp - paired joint state stamp [ms]
        self._chunks_at_last_report = 0
        self._images_at_last_report = 0

    @property
    def observations_waiting(self) -> int:
        """Images received whose outcome is not counted yet (0, 1 or 2)."""
        return int(self.pending is not None) + int(self.in_inference)

    # -- images ---------------------------------------------------------------------------------
    def image_throttled(self) -> None:
        """An image came sooner than the observation period: received and dropped (throttled)."""
        self.images_received += 1
        self.drops.add(DropReason.THROTTLED)

    def image_refused(self, reason: DropReason) -> None:
        """An image refused on arrival (bad_image): received and dropped."""
        self.images_received += 1
        self.drops.add(reason)

    def image_accepted(self, observation: T) -> bool:
        """An image to observe: it becomes the pending one; True if it superseded (dropped) one."""
        self.images_received += 1
        superseded = self.pending is not None
        if superseded:
            self.drops.add(DropReason.SUPERSEDED)
        self.pending = observation
        return superseded

    def start_inference(self) -> T:
        """Take the pending observation into inference (it stays waiting until its outcome)."""
        observation = self.pending
        if observation is None:
            raise RuntimeError("no pending observation to start inference on")
        self.pending = None
        self.in_inference = True
        return observation

    def inference_dropped(self, reason: DropReason) -> None:
        """The observation in inference was dropped (stale, unpaired, inference_error)."""
        self.drops.add(reason)
        self.in_inference = False

    def chunk_published(self, inference_ms: float, obs_to_chunk_ms: float, pairing_offset_ms: float,
                        obs_to_receipt_ms: float | None = None, receipt_to_inference_ms: float | None = None,
                        inline: bool = False) -> None:
        """The observation in inference became a published chunk (obs_to_receipt_ms: its image's
        stamp to its arrival in the node; receipt_to_inference_ms: that arrival to the policy's call;
        each when known; inline: inferred in the image callback)."""
        self.in_inference = False
        self.chunks_published += 1
        self.chunks_inline += int(inline)
        self.inference_ms.add(inference_ms)
        self.obs_to_chunk_ms.add(obs_to_chunk_ms)
        self.pairing_offset_ms.add(pairing_offset_ms)
        if obs_to_receipt_ms is not None:
            self.obs_to_receipt_ms.add(obs_to_receipt_ms)
        if receipt_to_inference_ms is not None:
            self.receipt_to_inference_ms.add(receipt_to_inference_ms)

    # -- other inputs -----------------------------------------------------------------------------
    def joint_state_received(self) -> None:
        self.joint_states_received += 1

    def input_dropped(self, reason: DropReason) -> None:
        """A dropped input that is no image (bad_joint_state)."""
        self.drops.add(reason)

    # -- report -----------------------------------------------------------------------------------
    def report(self) -> PolicyReport:
        """The report of the period since the last one (and start the next): WARN when images came
        but no chunk did. Values: counts, observations_waiting, `<stat>_p50/p99/max/mean` (3
        decimals) of inference_ms, obs_to_chunk_ms, obs_to_receipt_ms, receipt_to_inference_ms,
        pairing_offset_ms, then `drops_<reason>`."""
        chunks = self.chunks_published - self._chunks_at_last_report
        images = self.images_received - self._images_at_last_report
        self._chunks_at_last_report = self.chunks_published
        self._images_at_last_report = self.images_received
        if images > 0 and chunks == 0:
            level, message = Level.WARN, f"{images} images but no chunk in the last period (see drops)"
        else:
            level, message = Level.OK, f"{chunks} chunks in the last period"
        values: dict[str, int | str] = {
            "images_received": self.images_received,
            "joint_states_received": self.joint_states_received,
            "chunks_published": self.chunks_published,
            "observations_waiting": self.observations_waiting,
            "chunks_inline": self.chunks_inline,
        }
        for prefix, stats in (("inference_ms", self.inference_ms), ("obs_to_chunk_ms", self.obs_to_chunk_ms),
                              ("obs_to_receipt_ms", self.obs_to_receipt_ms),
                              ("receipt_to_inference_ms", self.receipt_to_inference_ms),
                              ("pairing_offset_ms", self.pairing_offset_ms)):
            for key, value in stats.summary().items():
                values[f"{prefix}_{key}"] = f"{value:.3f}"
        for reason, count in self.drops.as_dict().items():
            values[f"drops_{reason}"] = count
        return PolicyReport(level, message, values)

    def balance(self) -> int:
        """images_received - chunks_published - image drops - observations_waiting: 0 always."""
        dropped = sum(self.drops[reason] for reason in IMAGE_DROPS)
        return self.images_received - self.chunks_published - dropped - self.observations_waiting
