"""The `xce` command line (typer): role subcommands and LSF/Slurm-like verbs."""
