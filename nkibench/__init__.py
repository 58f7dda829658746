"""NKIBench problems: NumPy references, inputs, baseline kernels, roofline counts."""
