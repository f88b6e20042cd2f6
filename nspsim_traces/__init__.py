"""Data package for nspsim's built-in length traces.

``data/*.json`` holds derived facts only: binned histograms with fitted parameters, each naming its
source. Raw third-party traces are never shipped. ``build_wikipedia_hist.py`` regenerates
``data/wikipedia_hist.json`` from the FlexSP artifact. ``README.md`` describes every built-in trace.
"""
