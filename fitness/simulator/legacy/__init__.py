"""The legacy `neuronxcc.nki` front-end: the dialect's rules and API on top of the core.

`language` (nl), `isa` (nisa), `loops` (affine/sequential/static ranges, Python `range` in
kernels) and `shim` (the `neuronxcc` module objects, `nki.jit` and the launchers, and
`FRONTEND`, the handlers the core calls for Python syntax on tiles).
"""
