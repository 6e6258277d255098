"""core/safety."""
