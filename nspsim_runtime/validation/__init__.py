"""The built-in validation of the simulator against the runtime (``python -m nspsim_runtime.validate``):
cases (:mod:`.cases`), running them (:mod:`.run`) and the error statistics (:mod:`.stats`, pure)."""
