"""anatomy: train BERT-family models and explain their GPU memory, from Python.

The package carries the `anatomy` binary (bin/anatomy inside it) and calls it:

    import anatomy
    plan = anatomy.estimate(model="bert-base-uncased", per_device_train_batch_size=8, gpu="h100-80gb")
    plan["ledger"]["peak_total"]            # bytes, as `anatomy estimate --json` prints them

    for record in anatomy.train(model="bert-tiny", device="cpu", max_steps=20, logging_steps=5):
        print(record["step"], record["loss"])  # the lines of log.jsonl, as they are written

Keyword arguments are the command's flags: `per_device_train_batch_size=8` is
`--per-device-train-batch-size 8`; True gives a bare flag (`bf16=True` is
`--bf16`), False or None leaves it out; a list repeats the value after the flag.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

__all__ = ["binary", "command_line", "estimate", "train", "AnatomyError"]
__version__ = "0.1.0"


class AnatomyError(RuntimeError):
    """The binary exited with an error; `message` is its error line."""

    def __init__(self, args: List[str], returncode: int, output: str):
        lines = [line for line in output.strip().splitlines() if line.strip()]
        self.message = lines[-1] if lines else f"exit status {returncode}"
        self.returncode = returncode
        self.output = output
        super().__init__(f"anatomy {' '.join(args)}: {self.message}")


def binary() -> str:
    """The path of the `anatomy` binary: $ANATOMY_BINARY, else the one in this package."""
    explicit = os.environ.get("ANATOMY_BINARY")
    if explicit:
        return explicit
    return str(Path(__file__).resolve().parent / "bin" / "anatomy")


def command_line(**flags: Any) -> List[str]:
    """The flags as the command line takes them (see the module's docstring)."""
    args: List[str] = []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args.append(flag)
            args.extend(str(v) for v in value)
        else:
            args.extend([flag, str(value)])
    return args


def estimate(**flags: Any) -> Dict[str, Any]:
    """The memory plan of `anatomy train` with these flags, as `anatomy estimate --json` prints it."""
    args = ["estimate", "--json", *command_line(**flags)]
    done = subprocess.run([binary(), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise AnatomyError(args, done.returncode, done.stderr + done.stdout)
    return json.loads(done.stdout)


def train(output_dir: Optional[str] = None, echo: bool = False, **flags: Any) -> Iterator[Dict[str, Any]]:
    """Runs `anatomy train` with these flags and yields each record of its log.jsonl as it is written.

    output_dir: where the run writes (its model, log.jsonl, anatomy.json); a temporary
    directory, removed afterwards, when not given. echo: pass the run's terminal output
    through to this process's stdout. Raises AnatomyError when the run fails.
    """
    owned = None
    if output_dir is None:
        owned = tempfile.TemporaryDirectory(prefix="anatomy-train-")
        output_dir = owned.name
    args = ["train", "--output-dir", str(output_dir), *command_line(**flags)]
    log_path = Path(output_dir) / "log.jsonl"
    output = tempfile.TemporaryFile(mode="w+")
    process = None
    try:
        process = subprocess.Popen([binary(), *args], stdout=None if echo else output,
                                   stderr=None if echo else subprocess.STDOUT, text=True)
        position = 0
        pending = ""

        def read_new() -> Iterator[Dict[str, Any]]:
            nonlocal position, pending
            if not log_path.exists():
                return
            with open(log_path, "r", encoding="utf-8") as f:
                f.seek(position)
                chunk = f.read()
                position = f.tell()
            pending += chunk
            *complete, pending = pending.split("\n")
            for line in complete:
                if line.strip():
                    yield json.loads(line)

        while process.poll() is None:
            yield from read_new()
            time.sleep(0.05)
        yield from read_new()
        if process.returncode != 0:
            output.seek(0)
            raise AnatomyError(args, process.returncode, output.read())
    finally:
        if process is not None and process.poll() is None:  # the caller stopped iterating: stop the run
            process.terminate()
            process.wait()
        output.close()
        if owned is not None:
            owned.cleanup()
