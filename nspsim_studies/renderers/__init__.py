"""The report renderers that ``nspsim`` and the runtime load by name (plotly lives in this layer, so
they import it lazily, only when a report is asked for): ``compare_report`` (``nspsim compare -o``),
``sweep_report`` (``nspsim plot``), ``reference_report`` (``nspsim validate -o``) and
``validation_report`` (``python -m nspsim_runtime.validate``). Each name is written once, as a constant in
the module that loads it, and declared to the layering test (``tests/architecture/test_layering.py``)."""
