"""The configuration file: its tables checked key by key (`check`, `tables`), the settings
they become (`settings`, `gres`), and `loader`, which reads `xce.toml` into one `Config`.
"""
