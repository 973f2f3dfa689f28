"""The front doors, one module each (parse flags -> build from the library -> run).

Each module has ``build_parser()`` and ``main(argv)`` (a summary dict; tstrain's is its exit status); the ``jumbokit`` command dispatches to them
(``jumbokit mae-pretrain ...``) and the scripts in the repository's ``recipes/`` folder call the same ``main``.
"""

# subcommand -> module under jumbokit.recipes
COMMANDS = {
    "mae-pretrain": "mae_pretrain",
    "linear-probe": "linear_probe",
    "supervised": "supervised",
    "sar-adapt": "sar_adapt",
    "nas-supernet": "nas_supernet",
    "nas-search": "nas_search",
    "export": "export",
    "validate": "validate",
    "predict": "predict",
    "tstrain": "tstrain",
}
