"""The `sim2real` command: one entry point for launch, nodes, training, evaluation and tools."""
