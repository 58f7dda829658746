"""Kernels for the evaluation-service tests: adversarial ones and small honest ones (silu)."""

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""

# A correct silu for shapes whose rows are a multiple of 128 (no masks).
SILU_BODY = """
@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(N)[None, :]
    for m in nl.affine_range(M // 128):
        xt = nl.load(x[m * 128 + i_p, i_f])
        e = nisa.activation(op=nl.exp, data=xt, scale=-1.0)
        d = nl.add(e, 1.0)
        r = nisa.reciprocal(d)
        nl.store(out[m * 128 + i_p, i_f], value=nl.multiply(xt, r))
    return out
"""
SILU = HEADER + SILU_BODY

INFINITE_LOOP = HEADER + """
@nki.jit
def kernel(x):
    n = 0
    while True:
        n += 1
"""

HUGE_ALLOCATION = HEADER + """
@nki.jit
def kernel(x):
    big = np.ones((25 * 2**30,), dtype=np.float64)   # 200 GB on the host
    return big
"""

READ_API_KEY = HEADER + """
import posix

@nki.jit
def kernel(x):
    key = posix.environ.get(b"OPENAI_API_KEY", b"")   # (`os.environ` is an empty stand-in)
    return x
"""

READ_ENVIRON_FILE = HEADER + """
@nki.jit
def kernel(x):
    key = open("/proc/self/environ").read()
    return x
"""

DUNDER_ESCAPE = HEADER + """
@nki.jit
def kernel(x):
    classes = ().__class__.__base__.__subclasses__()
    return x
"""

IMPORT_GC = HEADER + """
import gc

@nki.jit
def kernel(x):
    objs = gc.get_objects()
    return x
"""

WRITE_FILE = HEADER + """
@nki.jit
def kernel(x):
    with open("leak.txt", "w") as f:
        f.write("data")
    return x
"""

BUILTINS_IMPORT = HEADER + """
@nki.jit
def kernel(x):
    os = __builtins__["__import__"]("os")
    return x
"""

NUMPY_FILE_READ = HEADER + """
@nki.jit
def kernel(x):
    answers = np.load("expected.npy")
    return x
"""

CONSTANT_OUTPUT = HEADER + """
@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(N)[None, :]
    for m in nl.affine_range(M // 128):
        nl.store(out[m * 128 + i_p, i_f], value=nl.full((128, N), 0.25, dtype=x.dtype))
    return out
"""

HOST_NUMPY = HEADER + """
@nki.jit
def kernel(x):
    return x / (1 + np.exp(-x))
"""

SYNTAX_ERROR = HEADER + """
@nki.jit
def kernel(x)
    return x
"""

NKI_RULE_BROKEN = HEADER + """
@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    big = nl.ndarray((256, N), dtype=x.dtype, buffer=nl.sbuf)
    return out
"""

# bf16 appears only through a string variable, so only the trace can see it; the unused
# bf16 scratch tile leaves the outputs exact.
HIDDEN_BF16 = HEADER + """
LOW = "bfloat16"
""" + SILU_BODY.replace("    M, N = x.shape\n",
                         "    M, N = x.shape\n    scratch = nl.zeros((128, 1), dtype=LOW, buffer=nl.sbuf)\n")

VISIBLE_BF16 = SILU.replace("r = nisa.reciprocal(d)", "r = nisa.reciprocal(d, dtype=nl.bfloat16)")
