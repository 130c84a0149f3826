"""cuTile configuration rules: per-arch defaults (configs/*.json) and the forward/backward
choice."""
