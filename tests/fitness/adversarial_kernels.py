"""Kernels that try to score without earning it (silu at its tiny shape, 128 x 512): each one
is cheaper than honest work, or right only where the gate usually looks."""

from eval_kernels import HEADER, SILU, SILU_BODY

# The honest kernel, renamed: an outer kernel that launches it gets its results as host arrays.
_INNER = SILU_BODY.replace("def kernel(x):", "def inner(x):")


def _launching(call: str) -> str:
    return HEADER + _INNER + f"""
@nki.jit
def kernel(x):
    return {call}
"""


# Finding 1: the launch and measurement APIs inside a kernel.
SIMULATE_KERNEL = _launching("nki.simulate_kernel(inner, x)")
BAREMETAL = _launching("nki.baremetal(inner)(x)")
BENCHMARK = _launching("nki.benchmark(warmup=1, iters=2)(inner)(x)")
PROFILE = _launching("nki.profile(save_neff_name='file.neff')(inner)(x)")

# A nested @nki.jit call is not a launch: it inlines into the caller's trace and costs its work.
INLINE_HELPER = HEADER + """
@nki.jit
def helper(xt):
    e = nisa.activation(op=nl.exp, data=xt, scale=-1.0)
    return nl.multiply(xt, nisa.reciprocal(nl.add(e, 1.0)))
""" + SILU_BODY.replace("""        e = nisa.activation(op=nl.exp, data=xt, scale=-1.0)
        d = nl.add(e, 1.0)
        r = nisa.reciprocal(d)
        nl.store(out[m * 128 + i_p, i_f], value=nl.multiply(xt, r))""",
                        """        nl.store(out[m * 128 + i_p, i_f], value=helper(xt))""")

# Finding 3: right on N(0, 1) inputs (no element reaches 8), wrong beyond.
ZERO_ABOVE_EIGHT = SILU.replace(
    "nl.store(out[m * 128 + i_p, i_f], value=nl.multiply(xt, r))",
    "nl.store(out[m * 128 + i_p, i_f], value=nl.multiply(nl.multiply(xt, r), nl.less(xt, 8.0, dtype=x.dtype)))",
)

# Finding 4: emulator internals reachable from kernel-visible objects. Every iteration of the
# affine loop writes all of `tile` (a loop-carried dependency NKI refuses); clearing the
# emulator's record of writes through the loop variable hid it.
LOOP_WRITES_CLEARED = HEADER + """
@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((128, N), dtype=x.dtype, buffer=nl.sbuf)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(N)[None, :]
    for m in nl.affine_range(2):
        tile[i_p, i_f] = nl.load(x[i_p, i_f])
        m.loop.writes.clear()
    e = nisa.activation(op=nl.exp, data=tile, scale=-1.0)
    nl.store(out[i_p, i_f], value=nl.multiply(tile, nisa.reciprocal(nl.add(e, 1.0))))
    return out
"""

# The subscript cache of a shared nl.arange result: writable, and alive from seed to seed.
ARANGE_CACHE = SILU.replace("    i_f = nl.arange(N)[None, :]\n",
                            "    i_f = nl.arange(N)[None, :]\n    seen = nl.arange(N).k\n")

# Finding 5: nested deeper than ast.unparse can follow; it still parses.
DEEP_EXPRESSION = HEADER + "\nDEPTH = " + "+".join(["1"] * 600) + "\n" + SILU_BODY

# Finding 6: more outputs, and larger ones, than the reference has (each written in full).
SIX_OUTPUTS = SILU.replace("    return out\n", "    return out, out, out, out, out, out\n")
OVERSIZED_OUTPUT = HEADER + """
@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((8 * M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(N)[None, :]
    for m in nl.affine_range(8 * M // 128):
        nl.store(out[m * 128 + i_p, i_f], value=nl.load(x[i_p, i_f]))
    return out
"""
