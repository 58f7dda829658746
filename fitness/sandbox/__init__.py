"""The untrusted side: the static policy, the sandboxed kernel process (process.py, forkserver.py,
worker.py) and its audit hook (guard.py), and how a kernel file's entry function is chosen.
"""
