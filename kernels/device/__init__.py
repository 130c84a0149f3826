"""cuTile device code: kernel bodies, the CTA → work scheduler, tactic bits (see ``kernels``)."""
