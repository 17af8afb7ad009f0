"""The systemd units `xce init` renders (their @xce@, @config@ and @state@ filled in) and
flake.nix's NixOS module installs: one copy of each, shipped as package data.
"""
