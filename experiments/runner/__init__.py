"""The machinery of ``python -m experiments.run``: the command line and its checks (``options``),
the two modes (``modes``), the dry run (``dryrun``), what it costs (``costs``, refitted by
``costfit``), progress bars (``progress``) and the summary it prints (``report``).
"""
