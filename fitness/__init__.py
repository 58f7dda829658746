"""Evaluation of kernels: the service (service.py, executor.py) with its cache, pool, reference
data and seals; sandbox/ (the kernel process), correctness/ (the gate), measures/ (counters,
roofline), backends/ (simulator, trainium) and simulator/ (the NKI emulator and performance model).
"""
