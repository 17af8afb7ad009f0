"""Widgets of the console: the virtual job table and the connection banner."""
