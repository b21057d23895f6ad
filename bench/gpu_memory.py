"""gpu_memory.py: the peak of nvidia-smi's memory.used on GPU 0 while a benchmark's run goes on
(shared by compare.py and memory_accuracy.py)."""
import subprocess
import threading
import time


class PeakMemory:
    """Polls nvidia-smi for the memory used on GPU 0 (MiB) every `interval` seconds while a run goes on."""

    def __init__(self, interval=0.2):
        self.peak = 0
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                      "-i", "0"], capture_output=True, text=True, timeout=5).stdout.strip()
                if out:
                    self.peak = max(self.peak, int(out.splitlines()[0]))
            except (subprocess.SubprocessError, OSError, ValueError):
                pass  # a missed sample; the next one counts
            time.sleep(self._interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
