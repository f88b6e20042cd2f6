"""nspsim: a simulator-first research platform for nested sequence parallelism (NSP).

Pure Python (numpy, scipy, simpy, networkx): the SP tree, traces and batches, model and cluster
specs, the hierarchical cost model, planners, the Plan contract and a discrete-event simulator.
It never imports torch, plotly or ``runtime`` (``tests/architecture/test_layering.py`` enforces this).
"""

__version__ = "0.1.0"
