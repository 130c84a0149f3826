"""cuTile build tools: export signatures, build resources, toolchain checks."""
