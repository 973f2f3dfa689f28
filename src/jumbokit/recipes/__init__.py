"""The front doors, one module each (parse flags -> build from the library -> run).

Each module has ``build_parser()`` and ``main(argv)``, which returns the run's summary and raises on bad input; the
``jumbokit`` command dispatches to them (``jumbokit mae-pretrain ...``; the subcommands are ``jumbokit.cli.COMMANDS``)
and turns bad input into one line and an exit status; the scripts in the repository's ``recipes/`` folder run the
same way. The flags front doors share live in :mod:`jumbokit.cli`.
"""
