"""``load_trace``: a trace by built-in name or by file path.

A built-in name wins over a file of the same name (``./NAME`` means the file). A ``.json`` file is a
histogram; every other file is a list of lengths (``readers``) and becomes an ``EmpiricalTrace``.
Trade-off: the kind is chosen by suffix alone, never by sniffing the content, so a misnamed file fails
with its reader's error rather than being guessed at.
"""

from __future__ import annotations

from pathlib import Path

from nspsim.jsonfile import read_bytes
from nspsim.trace.base import LengthTrace, TraceFile
from nspsim.trace.builtins import BUILTIN_TRACES, builtin_trace_names
from nspsim.trace.empirical import EmpiricalTrace
from nspsim.trace.histogram import HistogramTrace
from nspsim.trace.readers import parse_lengths


def load_trace(spec: str) -> LengthTrace:
    """A built-in trace by name, or a trace file by path. A built-in name wins over a file of the
    same name; write ``./NAME`` to mean the file.

    Files: ``.npy`` (1-D integer array), ``.csv`` (header with a ``length`` column), ``.jsonl`` (an
    object with an integer ``length`` field on every line), ``.json`` (a histogram in the
    ``nspsim-length-histogram/1`` layout), and anything else as text (one positive integer per line;
    blank lines and ``#`` comments are skipped). Text formats are UTF-8, or UTF-16/32 when the file
    starts with a byte-order mark (a UTF-8 mark is dropped). A pipe (``<(...)``) or a FIFO reads like a
    file. The file is read once; the trace records it (:class:`TraceFile`: the path and the hash of
    those bytes), and its ``identity`` is ``<file name>@<hash>``. Any problem raises a one-line
    ``ValueError``.
    """
    if spec in BUILTIN_TRACES:
        return BUILTIN_TRACES[spec]()
    names = ", ".join(builtin_trace_names())
    if not spec.strip():
        raise ValueError(f"trace: empty path; give a trace file or a built-in name ({names})")
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"trace file not found: {spec} (built-in traces: {names})")
    if path.is_dir():
        raise ValueError(f"{spec} is a directory, not a trace file")
    data = read_bytes(path, "trace file")
    file = TraceFile.of(str(path), data)
    if path.suffix.lower() == ".json":
        return HistogramTrace.from_json_bytes(data, where=str(path), file=file)
    lengths = parse_lengths(data, where=str(path), suffix=path.suffix)
    return EmpiricalTrace(name=path.name, source=str(path), file=file, lengths=lengths)
