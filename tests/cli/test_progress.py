"""Progress bars start no thread, so the simulator's cycle-collector pause (taken only when its thread
is the process's only one) applies under ``nspsim sweep`` and ``nspsim compare`` too (issue 26 item 1:
tqdm's monitor thread made every simulated step under a bar 1.5-2.2x slower)."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from pathlib import Path

from nspsim.cli.commands.compare import ProgressBar
from nspsim.cli.progress import Bar

SPEC = """
[workload]
model = "tiny"
cluster = "cpu"
gpus = 4
tokens_per_batch = "16k"
max_context = "4k"
[run]
planners = ["static", "nsp"]
iters = 1
"""


def test_a_bar_starts_no_thread() -> None:
    before = threading.active_count()
    with Bar(total=3, file=io.StringIO()) as bar:
        bar.update(2)
        assert threading.active_count() == before
    terminal = io.StringIO()
    terminal.isatty = lambda: True  # type: ignore[method-assign]
    progress = ProgressBar(terminal)
    progress(1, 3, "nsp")
    assert threading.active_count() == before
    progress.close()


RECORDER = """
import gc, sys
import nspsim.simulator.simulator as sim
from nspsim.cli.main import main

original, seen = sim._cyclic_gc_paused_if_alone, []


class Recorder:
    def __enter__(self):
        self.inner = original()
        self.inner.__enter__()
        seen.append(gc.isenabled())

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


sim._cyclic_gc_paused_if_alone = Recorder
code = main(sys.argv[1:])
print("steps", len(seen), "collector on in", sum(seen))
sys.exit(code)
"""


def test_every_simulated_step_of_a_sweep_runs_with_the_collector_paused(tmp_path: Path) -> None:
    """``nspsim sweep --jobs 1`` simulates in its own process under its bar (a fresh interpreter here,
    so no other test's thread is alive): every step must see the collector off (it was on for all of
    them while the bar's monitor thread lived)."""
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    args = ["sweep", str(spec), "-o", str(tmp_path / "out"), "--jobs", "1"]
    done = subprocess.run([sys.executable, "-c", RECORDER, *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    words = done.stdout.split()
    steps, on = int(words[words.index("steps") + 1]), int(words[-1])
    assert steps >= 2 and on == 0, done.stdout
