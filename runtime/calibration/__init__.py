"""Machine calibration for ``python -m runtime.calibrate``: measure (:mod:`runtime.calibration.measure`,
torch) and fit (:mod:`runtime.calibration.fit`, pure) the coefficients of an nspsim cost profile."""
