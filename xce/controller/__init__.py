"""The controller's service layer: turns requests into events and runs its loops."""
