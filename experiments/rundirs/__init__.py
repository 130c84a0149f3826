"""Run directories: reserved before the work, written atomically, published only when complete
(``rundir``), and the journal that keeps a measured run's finished pieces (``journal``).
"""
