"""The evolutionary search: the generational (engine.py) and asynchronous (steady.py) loops, and
the selection, latency-first cascade, islands, MAP-Elites archive, novelty and descriptors they use.
"""
