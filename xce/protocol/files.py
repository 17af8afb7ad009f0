"""The file-body contract between clients, workers and the controller (job files).

A file body declares its SHA-256 in `X-XCE-SHA256`: either the 64 hex digits before the
body, or `trailing`, which says the body is the file followed by the 64 hex digits of its
SHA-256 (`Content-Length` counts both). The trailing form lets a sender hash while it sends,
so a file is read once; the receiver keeps the file only when its own digest matches.
"""

from __future__ import annotations

DIGEST_HEADER = "X-XCE-SHA256"
TRAILING = "trailing"
DIGEST_BYTES = 64  # hex digits of a SHA-256
