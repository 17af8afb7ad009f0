"""Setting up a cluster: `xce init` (a new cluster directory) and `xce init --join`."""
