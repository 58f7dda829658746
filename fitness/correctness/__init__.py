"""Whether a kernel is right: the gate (gate.py), precision floors, the reference data of a seed
as a judgement reads it (seeds.py, arrays.py), and kernel identity (normalize.py).
"""
