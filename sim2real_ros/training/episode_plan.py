"""Which episode indices a student's training run plays (the world of episode i is
sim.world.episode_seed(run seed, i)), so its evaluation never replays one of them.

BC plays [0, bc_episodes), DAgger round r (1-based) [dagger_offset(r), + dagger_episodes), the
trainer's nominal evaluation [EVAL_SEED_OFFSET, + eval_episodes); each in a block of its own of
EPISODE_BLOCK indices. Fine-tuning's co-training episodes start at 5,000,000 (finetune/sim_data.py).
"""
from __future__ import annotations

EPISODE_BLOCK = 100_000  # episodes of one stage at most
EVAL_SEED_OFFSET = 9 * EPISODE_BLOCK  # the trainer's evaluation
# Round 48 starts at 4,900,000, the last block below fine-tuning's co-training episodes.
MAX_DAGGER_ROUNDS = 48


def dagger_offset(round_index: int) -> int:
    """First episode index of DAgger round `round_index` (1-based): that many blocks up, past the
    evaluation's block from round 9 on (a ninth round once played the evaluation's episodes, and the
    run refused to evaluate after all its training). Rounds 1-8 are where they always were."""
    block = round_index if round_index * EPISODE_BLOCK < EVAL_SEED_OFFSET else round_index + 1
    return block * EPISODE_BLOCK


def training_index_ranges(bc_episodes: int, dagger_rounds: int, dagger_episodes: int) -> list[list[int]]:
    """[first, last) episode index ranges of BC and of each DAgger round, in order."""
    return [[0, bc_episodes]] + [[dagger_offset(r), dagger_offset(r) + dagger_episodes]
                                 for r in range(1, dagger_rounds + 1)]
