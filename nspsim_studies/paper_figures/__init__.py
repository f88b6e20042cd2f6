"""The NSP paper's Figures 7-10 as studies built on ``nspsim sweep``, one module each, run as
``python -m nspsim_studies.paper_figures.figN``: a spec builder (``build_spec``), a drawing function
(``figure``) that draws exactly the spec's planners, tables and ``main``; decoded paper values in
:mod:`.paper_values`, the shared command line, sweep running and output writing in :mod:`.common`."""
