"""Tuning the default configurations: the candidates (``candidates``), the tuner (``tune``), the
rule sweep (``sweep``) and the rule fit (``rulefit``).
"""
