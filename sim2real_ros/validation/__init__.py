"""Staged validation before a supervised real rollout (`sim2real validate`).

gates.py: config/gates.yaml, stage results with 95% intervals, the verdict (pure).
sim_vs_real.py: real episode outcomes from bags, failure-mode comparison.
validate.py: `validate(checkpoint, real_bags, gates, report_dir, ...)`, which runs the sim (torch).
"""
