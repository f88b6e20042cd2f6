"""Checking the simulator against published GPU measurements (``nspsim validate``).

A *reference set* (:mod:`nspsim.validation.dataset`) is rows of published figures, each with its
source and its configuration in nspsim's terms: end-to-end training throughput, attention and GEMM
kernels, collectives. :func:`~nspsim.validation.evaluate.evaluate_row` predicts each row with the
same specs and cost model the planners and the simulator use, or says why the model cannot express
it; :mod:`nspsim.validation.summary` turns predictions into signed errors and per-kind MAPE.
:mod:`nspsim.validation.fit` derives the published-measurement coefficients (attention kernel curves,
link latencies and bandwidths) from the *component* rows only; end-to-end rows never fit anything.
"""
