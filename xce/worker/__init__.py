"""The worker: runs dispatched jobs as real processes and reports their usage."""
