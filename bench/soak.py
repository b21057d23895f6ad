#!/usr/bin/env python3
"""soak.py: a long run whose memory must stay flat, with a kill and a resume in the middle.

CPU (the default): bert-tiny trains on the license task (tests/fixtures/license-text) for --steps steps
(5,000), evaluating and saving every --every steps (500, the newest 2 checkpoints kept), logging every
50. When the log reaches --kill-at (half the steps) the process is killed with SIGKILL; the run is started
again with --resume-from-checkpoint on the newest checkpoint and goes on to the end. log.jsonl carries,
per logging step, the resident set (host_rss_bytes), the ledger's live bytes and the pool's reserved bytes.

GPU (--device cuda --bf16 ...): the same without the task, on dummy data, and without the kill:
--steps 2000 of the model given.

Checks, after the first --warm-up steps of each process (the killed one's records up to the checkpoint
the resume starts from, the resumed one's after it), split in two halves: the largest resident set of
the second half is at most --rss-slack MiB above the first half's, and the largest ledger live bytes and
pool reserved bytes are not above the first half's (with per-batch padding the step boundary holds a batch
of varying length, so these vary within a bound; a leak raises the bound). Exit status 1 when a check
fails. It prints each process's figures. --analyse DIR reports on an earlier run's log.

    python3 bench/soak.py --anatomy build/anatomy [--steps 5000] [--every 500] [--max-seq-length 128] [--batch 8]
    python3 bench/soak.py --anatomy build/anatomy --device cuda --model bert-base-uncased --bf16 --steps 2000
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def records(log):
    if not os.path.exists(log):
        return []
    out = []
    with open(log) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line being written
    return out


def processes(log, resumed_at=None):
    """The logging records of log.jsonl, split where the steps go back (a process that appended after
    another without rewriting the log) and after step `resumed_at` (a resume rewrites the log from its
    checkpoint's step on: the records up to it are the first process's, those after it the second's)."""
    rows = [r for r in records(log) if "loss" in r]
    out, start = [], 0
    for i in range(1, len(rows) + 1):
        if (i == len(rows) or rows[i]["step"] <= rows[i - 1]["step"]
                or (resumed_at is not None and rows[i - 1]["step"] <= resumed_at < rows[i]["step"])):
            out.append((f"records {len(out) + 1}", rows[start:i]))
            start = i
    return out


def report(runs, warm_up, rss_slack):
    """Prints each process's figures; False when one grows: the largest resident set, ledger live or pool
    reserved of the second half of its steady records above the first half's (the resident set by more
    than rss_slack MiB). Step boundaries differ by the batch held (per-batch padding), so values vary
    within a bound; a leak raises the bound."""
    flat = True
    for name, rs in runs:
        first_step = rs[0]["step"] if rs else 0
        steady = [r for r in rs if r["step"] >= first_step + warm_up]
        if len(steady) < 4:
            print(f"  {name}: too few logging steps after the warm-up ({len(steady)})")
            flat = False
            continue
        half = len(steady) // 2
        a, b = steady[:half], steady[half:]
        def top(rows, key, scale=1):
            return max(r[key] for r in rows) / scale
        rss_a, rss_b = top(a, "host_rss_bytes", 2**20), top(b, "host_rss_bytes", 2**20)
        live_a, live_b = top(a, "device_live_bytes"), top(b, "device_live_bytes")
        res_a, res_b = top(a, "device_reserved_bytes"), top(b, "device_reserved_bytes")
        print(f"  {name}: steps {steady[0]['step']}..{steady[-1]['step']} ({len(steady)} records), largest in the "
              f"first half / second half: resident set {rss_a:.1f} / {rss_b:.1f} MiB, ledger live {live_a} / "
              f"{live_b} B, pool reserved {res_a} / {res_b} B; loss {steady[0]['loss']:.4f} -> "
              f"{steady[-1]['loss']:.4f}")
        if rss_b > rss_a + rss_slack or live_b > live_a or res_b > res_a:
            flat = False
    return flat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anatomy", default=os.path.join(ROOT, "build", "anatomy"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="bert-tiny")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--kill-at", type=int, default=None)
    ap.add_argument("--warm-up", type=int, default=500)
    ap.add_argument("--max-seq-length", type=int, default=None, help="CPU: the task's (default 128)")
    ap.add_argument("--batch", type=int, default=8, help="per-device train batch size")
    ap.add_argument("--rss-slack", type=float, default=4.0, help="MiB")
    ap.add_argument("--keep", help="a directory for the run (default: a temporary one)")
    ap.add_argument("--analyse", metavar="DIR", help="only report on DIR/out/log.jsonl of an earlier run")
    args = ap.parse_args()
    cpu = args.device == "cpu"
    steps = args.steps or (5000 if cpu else 2000)
    kill_at = args.kill_at if args.kill_at is not None else (steps // 2 if cpu else 0)
    work = args.keep or tempfile.mkdtemp(prefix="anatomy-soak-")
    out = os.path.join(work, "out")
    log = os.path.join(out, "log.jsonl")
    task = os.path.join(ROOT, "tests", "fixtures", "license-text")
    common = [args.anatomy, "train", "--device", args.device, "--model", args.model, "--max-steps", str(steps),
              "--logging-steps", "50", "--output-dir", out, "--no-progress", "--seed", "3"]
    if cpu:
        common += ["--train-file", os.path.join(task, "train.jsonl"), "--validation-file",
                   os.path.join(task, "validation.jsonl"), "--vocab", os.path.join(task, "vocab.txt"),
                   "--max-seq-length", str(args.max_seq_length or 128), "--per-device-train-batch-size",
                   str(args.batch), "--learning-rate", "1e-3",
                   "--eval-strategy", "steps", "--eval-steps", str(args.every), "--save-strategy", "steps",
                   "--save-steps", str(args.every), "--save-total-limit", "2"]
    else:
        common += ["--dummy-size", str(steps * args.batch), "--dummy-seq-len", str(args.max_seq_length or 512),
                   "--per-device-train-batch-size", str(args.batch)]
    if args.bf16:
        common.append("--bf16")

    if args.analyse:
        sys.exit(0 if report(processes(os.path.join(args.analyse, "out", "log.jsonl")), args.warm_up,
                             args.rss_slack) else 1)

    start = time.time()
    first = subprocess.Popen(common, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = False
    resumed_at = None
    if kill_at > 0:
        while first.poll() is None:
            rs = [r for r in records(log) if "loss" in r]
            if rs and rs[-1]["step"] >= kill_at:
                first.send_signal(signal.SIGKILL)
                killed = True
                break
            time.sleep(0.2)
    output = first.communicate()[0]
    if not killed and first.returncode != 0:
        print(output)
        sys.exit(f"error: the run failed with exit status {first.returncode}")
    if killed:
        checkpoints = sorted((d for d in os.listdir(out) if d.startswith("checkpoint-")),
                             key=lambda d: int(d.split("-")[1]))
        if not checkpoints:
            sys.exit("error: killed before the first checkpoint; give a later --kill-at")
        resumed = subprocess.run(common + ["--resume-from-checkpoint", os.path.join(out, checkpoints[-1])],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if resumed.returncode != 0:
            print(resumed.stdout)
            sys.exit(f"error: the resumed run failed with exit status {resumed.returncode}")
        print(f"killed at step {kill_at} or just after; resumed from {checkpoints[-1]}")
        resumed_at = int(checkpoints[-1].split("-")[1])
    seconds = time.time() - start

    # Each process against itself after its own warm-up: the killed one up to its checkpoint, the resumed one after.
    failed = not report(processes(log, resumed_at), args.warm_up, args.rss_slack)
    evals = [r for r in records(log) if any(k.startswith("eval_") for k in r)]
    if evals:
        print(f"  evaluations: {len(evals)}, last {json.dumps({k: v for k, v in evals[-1].items() if k.startswith('eval_')})}")
    print("FLAT" if not failed else "NOT FLAT")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
