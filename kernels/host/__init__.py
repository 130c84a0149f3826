"""cuTile host path: CutileFamily, the backward launches, attention() and its operators, warm-up."""
