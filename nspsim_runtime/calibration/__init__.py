"""Machine calibration for ``python -m nspsim_runtime.calibrate``: measure (:mod:`nspsim_runtime.calibration.measure`,
torch) and fit (:mod:`nspsim_runtime.calibration.fit`, pure) the coefficients of an nspsim cost profile."""
