"""The controller process put together: `compose` builds its parts (state, store, scheduler, API,
HA node) and wires them; `main` runs them until told to stop."""
