"""The ``nspsim`` command line: :mod:`~nspsim.cli.main` (entry point), :mod:`~nspsim.cli.flags`
(shared flags, the leaf every command imports) and :mod:`~nspsim.cli.commands` (one module per subcommand)."""
