"""The `vprom` subcommands, one module per group of stages (see `base.Command`)."""
