"""The simulator's dialect-neutral core: machine semantics that every NKI front-end lowers to.

`runtime` (the running machine, loops, scopes, the front-end handlers), `tensor` (HBM/SBUF/PSUM
storage and views), `indexing` and `subscript` (affine index expressions and views), `instr`
(the instruction layer: operands, fresh results, assignment, accumulation, trace records),
`engines` (instructions the front-ends share), `ops` (ALU and activation tables), `coverage`
(written output elements), `blas` (single-threaded BLAS), `launch` (running a kernel).
Nothing here imports a front-end: what depends on the dialect, the front-end supplies
(`runtime.FrontEnd`).
"""
