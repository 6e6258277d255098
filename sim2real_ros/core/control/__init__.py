"""core/control."""
