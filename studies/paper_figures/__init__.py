"""The NSP paper's Figures 7-10 as studies built on ``nspsim sweep`` (``studies/fig7.py`` ... ``fig10.py``
are thin scripts over :mod:`.fig7` ... :mod:`.fig10`); decoded paper values in :mod:`.paper_values`,
the shared command line, sweep running and output writing in :mod:`.common`."""
