"""The full-screen Textual console, `xce tui`.

`app.py` holds the client, the live data fed by the controller's event stream, and the action
runner; `model.py` (jobs table data) and `filter.py` (the `/` filter language) are pure;
`screens/` has one module and one .tcss per screen; `widgets/` the virtual job table and the
connection banner. Textual is imported only when `xce tui` runs.
"""
