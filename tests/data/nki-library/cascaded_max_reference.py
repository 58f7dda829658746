"""NumPy reference of the NKI Library's cascaded_max kernel (nkilib/core/max/cascaded_max.py).

Semantics of the library's own reference (cascaded_max_torch.py): the maximum of `x` along its
last axis and the index of that maximum, both with the last axis kept (size 1). The indices
as uint32, the kernel's output dtype (the torch reference casts to int32 only because torch
compares no uint32 tensors). Inputs: one float32 [BxS, V] tensor with BxS = 1 (the kernel's LNC1 case) and distinct
values (a permutation of a range, scaled), so that the index of the maximum is unique.
"""
import numpy as np

V = 4096


def get_inputs():
    x = (np.random.permutation(V).astype(np.float32) / V - 0.5).reshape(1, V)
    return [x]


def forward(x):
    values = np.max(x, axis=-1, keepdims=True)
    indices = np.argmax(x, axis=-1).astype(np.uint32).reshape(values.shape)
    return values, indices
