"""The controller's default port, apart from the settings: a client that names no
controller falls back to it, and must not import every settings table (and the core's
records) to learn one number."""

from __future__ import annotations

DEFAULT_PORT = 6820
