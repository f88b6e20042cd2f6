"""Study scripts: one per figure. They turn nspsim's typed records into plotly figures and files."""
