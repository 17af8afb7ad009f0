"""Durable storage on local disk: the event log (WAL), checkpoints and job files."""
