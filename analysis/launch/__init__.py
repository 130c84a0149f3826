"""Diagnostics of measured launches: how far CTAs drift apart (``drift``), where and when they
ran (``placement``), whether a counter's spread belongs to the ncu session (``sessions``), and
whether a second run reproduces the first within its spread (``compare``)."""
