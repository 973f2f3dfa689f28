"""The image front doors, one module each (parse flags -> build from the library -> run).

Each module has ``build_parser()`` and ``main(argv) -> dict``; the ``jumbokit`` command dispatches to them
(``jumbokit mae-pretrain ...``) and the scripts in the repository's ``recipes/`` folder call the same ``main``.
"""

# subcommand -> module under jumbokit.recipes (the time-series front door lives in jumbokit.timeseries.cli)
COMMANDS = {
    "mae-pretrain": "mae_pretrain",
    "linear-probe": "linear_probe",
    "supervised": "supervised",
    "sar-adapt": "sar_adapt",
    "nas-supernet": "nas_supernet",
    "nas-search": "nas_search",
    "export": "export",
}
