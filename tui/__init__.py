"""The full-screen Textual console (issue 7 fills this in)."""
