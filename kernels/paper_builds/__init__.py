"""The paper authors' builds under their toolchain and their per-step SASS costs (off the kernel
path)."""
