"""The wire format: Cap'n Proto schema of events and records, shared by WAL and replication."""
