"""The Foxglove server's defaults, in a module that imports nothing, so that nodes/parameters.py
(imported by every node process) names them without loading the Foxglove SDK."""

DEFAULT_PORT = 8765
DEFAULT_HOST = "127.0.0.1"  # loopback: listen beyond it only when the user asks (docs/viz.md)
DEFAULT_BACKLOG = 256  # queued messages per client before the oldest is dropped
