"""cuTile device code: kernel bodies, the CTA → work scheduler, tactic bits (kernels/__init__)."""
