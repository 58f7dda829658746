"""accelopt-evo: evolutionary, LLM-driven optimization of Trainium NKI kernels."""

__version__ = "0.1.0"
