"""core/perception."""
