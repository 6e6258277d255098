"""Image augmentation for the student's regression (training only; no ROS, no sim).

A random shift (DrQ's "pad and random crop", with the edge pixels repeated rather than padded with
zeros): each image moves by up to `max_px` pixels in x and y, its labels stay. The camera is fixed
in every episode, so without it the student can read where the cube is from the cube's absolute
pixel position alone; shifted, the image keeps what a grasp needs (where the jaws are against the
cube), not where both sit in the frame.
"""
from __future__ import annotations

import torch

MAX_SHIFT_PX = 16  # training config's image_shift_px: at most this (a sixth of a 96 px policy image)


def random_shift(images: torch.Tensor, max_px: int, generator: torch.Generator) -> torch.Tensor:
    """Each image of `images` (B, H, W, C) moved by its own integer offset in [-max_px, max_px] [px]
    in x and y, drawn from `generator`; the pixels moved in from outside repeat the edge. Same
    dtype and shape; max_px 0 returns `images` itself."""
    if max_px <= 0:
        return images
    count, height, width = images.shape[0], images.shape[1], images.shape[2]
    offsets = torch.randint(-max_px, max_px + 1, (count, 2), generator=generator)
    rows = (torch.arange(height)[None, :] + offsets[:, :1]).clamp_(0, height - 1)  # (B, H)
    cols = (torch.arange(width)[None, :] + offsets[:, 1:]).clamp_(0, width - 1)  # (B, W)
    return images[torch.arange(count)[:, None, None], rows[:, :, None], cols[:, None, :]]
