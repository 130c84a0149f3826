"""The study registry as plain data: each study's plan of cases per arch (``plans``, the
problem suites ``suites``, sequence lengths ``lengths``) and how it is run (``studies``: hooks by
dotted name, figures as the figure modules declare them). Imports nothing else of ``experiments``.
"""
