"""The current `nki` front-end (NKI 0.3+, `import nki`): the dialect's rules and API on top
of the core.

`language` (nl: tensor creation, loops, `nl.load/store`, high-level math), `isa` (nisa:
destination-first instructions, engines as `nisa.engine`), `views` (subscripts and the view
methods, `.ap` access patterns included) and `shim` (the `nki` module objects, `nki.jit`,
`nki.simulate`, and `FRONTEND`, the handlers the core calls for Python syntax on tensors).
"""
