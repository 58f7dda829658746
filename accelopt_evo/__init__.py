"""accelopt-evo: evolutionary, LLM-driven optimization of Trainium NKI kernels.

Layers, each importing only those below it (docs/architecture.md): cli/ (commands) -> runner.py
(a run's composition root) -> report/ (report.md, plots, the live page) -> search/ (the DEAP loop)
-> memory.py (the optimization memory) -> run/ (configuration, run folder and its formats) ->
errors.py.
"""

__version__ = "0.1.0"
