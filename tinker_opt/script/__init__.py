"""Reading launch scripts without executing them."""
