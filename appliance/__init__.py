"""The single-binary entry point and packaging data (issue 8 fills this in)."""
