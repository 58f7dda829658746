"""Built-in problems, one module each (layout documented in `silu.py`)."""
