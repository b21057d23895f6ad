"""bench_util.py: what the bench scripts that drive `anatomy` share."""
import subprocess
import sys


def run(cmd, env=None):
    """Runs `cmd` (echoed to stderr) and returns its stdout; on a non-zero exit prints the ends of its output and
    stops the script."""
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        raise SystemExit(f"failed with exit code {p.returncode}: {' '.join(cmd)}")
    return p.stdout
