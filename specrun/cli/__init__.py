"""The `specrun` command line (Typer): one module per command group, and the options they share."""
