"""XCE: a batch scheduler and cluster manager for on-premises and air-gapped clusters."""

__version__ = "0.2.0"
