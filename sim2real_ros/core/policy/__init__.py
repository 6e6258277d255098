"""core/policy."""
