"""Evaluation of kernels: sandboxed worker, correctness gate, backends, cache, pool."""
