"""Writing tuned scripts and results folders."""
