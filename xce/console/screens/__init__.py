"""The console's screens; each has its own .tcss beside it."""
