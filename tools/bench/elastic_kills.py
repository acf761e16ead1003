#!/usr/bin/env python3
"""Kill campaign for elastic training (issue 15): Fashion-MNIST with `[elastic] enabled = true` over
launched workers (samples/configs/elastic.ini), while this script kills workers at random steps.

  elastic_kills.py --runs 10 --kills 5                  # SIGKILL one worker, 50 kills in all
  elastic_kills.py --runs 5 --kills 2 --mode two        # SIGKILL two workers at once
  elastic_kills.py --runs 5 --kills 2 --mode stop       # SIGSTOP one worker (it stalls)
  elastic_kills.py --transport ucx ...                  # ucx over TCP (UCX_TLS=tcp,self)
  elastic_kills.py --workers 2 ...                      # a world of 2 (torchrun's comparison)

Every run starts --workers workers (3 by default) with [elastic] max_restarts high
enough that each killed worker is replaced (the launcher starts a newcomer, admitted at a step
boundary), so every kill strikes a full world. Kills are spread over the run; the next waits
until the world is whole again.
`two` kills two workers in the same instant and uses copies = 2 (with 3 workers and one copy,
two dead workers always take a state and its only copy with them). `stop` SIGSTOPs a worker: the
others count it gone once its lease ends (failure_timeout) and go on; the script SIGCONTs it
then, it finds itself counted gone and exits, and the launcher replaces it.

Per kill: the time from the signal to the first step completed by the new world (the metrics
file's wall_time of the first step after the one the new world went on from), and the steps
lost (steps done when the failure was noticed minus the step the new world went on from: the
steps redone). Per run: exit code, test accuracy, time, and whether anything of the job was left
in /dev/shm. Prints one line per kill and per run, then the medians and maxima, and fails (exit 1)
when a run fails, hangs, leaves /dev/shm entries or ends below --min-accuracy.

Needs a built tessera (cmake --preset release && cmake --build --preset release).
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EVENT = re.compile(
    r"elastic: \S+ generation (\d+): (\d+) worker\(s\); left (\S+); joined (\S+); "
    r"(?:failed at step (\d+), going on from step (\d+)|admitted at step (\d+)) \(([^)]*)\); "
    r"([0-9.]+) s")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--kills", type=int, default=5, help="kill events per run")
    p.add_argument("--mode", choices=["one", "two", "stop"], default="one")
    p.add_argument("--transport", choices=["shm", "ucx"], default="shm")
    p.add_argument("--workers", type=int, default=3, help="world size at start and after each kill")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seed", type=int, default=1, help="of the kill schedule")
    p.add_argument("--min-accuracy", type=float, default=88.0, help="percent")
    p.add_argument("--run-timeout", type=float, default=900.0, help="seconds before a run counts as hung")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="extra config override for every run")
    p.add_argument("--json", help="append every kill and run record to this JSON Lines file")
    return p.parse_args()


def creator_of(name):
    """The pid in a name tessera puts in /dev/shm (tessera-shm-<pid>-<hex>,
    tessera-replica-<pid namespace>-<pid>-<nonce>), or None."""
    m = re.fullmatch(r"tessera-(?:shm-|replica-\d+-)(\d+)-.*", name)
    return int(m.group(1)) if m else None


def shm_entries(pids):
    """The names in /dev/shm that processes `pids` created: /dev/shm is shared by every process
    on the host, so a run is judged only by what its own job made."""
    return {name for name in os.listdir("/dev/shm") if creator_of(name) in pids}


def job_processes(tag):
    """The pids of every process carrying `tag` in its environment (launcher and workers)."""
    return set(job_workers(tag, with_launcher=True).values())


def job_workers(tag, with_launcher=False):
    """{worker id: pid} of the running workers of the job carrying `tag` in its environment
    (with_launcher: the launcher too, under the id "launcher")."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if tag.encode() not in env or state == "Z":
            continue
        ids = [v[len(b"TESSERA_WORKER_ID="):].decode() for v in env
               if v.startswith(b"TESSERA_WORKER_ID=")]
        if ids:
            found[ids[0]] = int(name)
        elif with_launcher:
            found[f"launcher {name}"] = int(name)
    return found


def metrics(path):
    steps = []
    try:
        with open(path) as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                record = json.loads(line)
                if "loss" in record:
                    steps.append(record)
    except FileNotFoundError:
        pass
    return steps


def first_step_after(metrics_file, resumed, killed_at):
    """The metrics record of the first step the new world completed after it went on from step
    `resumed`, once it is known and later than the kill; else None. A step the old world
    completed after the signal (the victim had sent its part) and the new world redid is in the
    file twice: the new world's record is the last one, known once the step after it is there."""
    done = metrics(metrics_file)
    redone = [i for i, s in enumerate(done) if s["step"] == resumed + 1]
    if not redone or not any(s["step"] == resumed + 2 for s in done[redone[-1]:]):
        return None
    first = done[redone[-1]]
    return first if first["wall_time"] > killed_at else None


def events(path):
    with open(path, errors="replace") as f:
        return [m for m in (EVENT.search(line) for line in f) if m]


def run_once(args, run, rng, records):
    work = tempfile.mkdtemp(prefix="tessera-kills-")
    metrics_file = os.path.join(work, "metrics.jsonl")
    out_file = os.path.join(work, "out.txt")
    tag = f"ELASTIC_KILLS_JOB={os.getpid()}.{run}"
    kills_per_event = 2 if args.mode == "two" else 1
    overrides = [
        f"--runtime.transport={args.transport}",
        f"--runtime.world_size={args.workers}",
        f"--train.epochs={args.epochs}",
        "--train.schedule=cosine",
        "--train.checkpoint_dir=",
        "--train.checkpoint_every=0",
        f"--train.metrics_file={metrics_file}",
        "--train.progress=off",
        f"--elastic.max_restarts={args.kills * kills_per_event}",
        f"--elastic.copies={2 if args.mode == 'two' else 1}",
    ] + [f"--{s}" for s in args.set]
    env = dict(os.environ)
    env["ELASTIC_KILLS_JOB"] = tag.split("=", 1)[1]
    if args.transport == "ucx":
        env.setdefault("UCX_TLS", "tcp,self")
    command = [os.path.join(args.build, "bin", "tessera"), "train", "--config",
               os.path.join(ROOT, "samples", "configs", "elastic.ini")] + overrides
    started = time.time()
    with open(out_file, "w") as out:
        job = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    pids = {job.pid}  # every process of the job seen while it ran: the /dev/shm names it owns
    steps_per_epoch = 60000 // (64 * args.workers)
    total = steps_per_epoch * args.epochs
    # Kill steps spread over the run (not the first epoch's start, not the last epoch).
    kill_steps = sorted(rng.sample(range(steps_per_epoch // 2, total - steps_per_epoch),
                                   args.kills))
    kills = []
    hung = False
    for kill_step in kill_steps:
        # Wait for the step, with a full world (the previous kill's replacement in).
        while True:
            if job.poll() is not None:
                break
            if time.time() - started > args.run_timeout:
                hung = True
                break
            done = metrics(metrics_file)
            pids |= job_processes(tag)
            workers = job_workers(tag)
            seen = events(out_file)
            world = int(seen[-1].group(2)) if seen else args.workers
            if (done and done[-1]["step"] >= kill_step and world == args.workers
                    and len(workers) == args.workers):
                break
            time.sleep(0.02)
        if job.poll() is not None or hung:
            break
        workers = job_workers(tag)
        victims = rng.sample(sorted(workers), kills_per_event)
        events_before = len(events(out_file))
        steps_before = metrics(metrics_file)
        last_step = steps_before[-1]["step"] if steps_before else 0
        killed_at = time.time()
        for victim in victims:
            os.kill(workers[victim], signal.SIGSTOP if args.mode == "stop" else signal.SIGKILL)
        # The new world: its line, then its first completed step.
        record = {"run": run, "mode": args.mode, "transport": args.transport, "victims": victims,
                  "step_at_kill": last_step}
        while job.poll() is None and time.time() - killed_at < 120:
            pids |= job_processes(tag)
            seen = events(out_file)[events_before:]
            failure = next((m for m in seen if m.group(5) is not None), None)
            if failure:
                resumed = int(failure.group(6))
                first = first_step_after(metrics_file, resumed, killed_at)
                if first:
                    record.update({
                        "generation": int(failure.group(1)),
                        "failed_at_step": int(failure.group(5)),
                        "resumed_at_step": resumed,
                        "steps_lost": int(failure.group(5)) - resumed,
                        "state_from": failure.group(8),
                        "regroup_s": float(failure.group(9)),
                        "kill_to_step_s": first["wall_time"] - killed_at,
                    })
                    break
            time.sleep(0.01)
        if args.mode == "stop":
            for victim in victims:
                try:
                    os.kill(workers[victim], signal.SIGCONT)
                except ProcessLookupError:
                    pass
        kills.append(record)
        records.append(record)
        if "kill_to_step_s" in record:
            print(f"run {run} kill {len(kills)}: {','.join(victims)} at step {last_step}: "
                  f"first step of generation {record['generation']} after "
                  f"{record['kill_to_step_s']:.3f} s (regroup {record['regroup_s']:.2f} s), "
                  f"steps lost {record['steps_lost']}, state from {record['state_from']}",
                  flush=True)
        else:
            print(f"run {run} kill {len(kills)}: {','.join(victims)} at step {last_step}: "
                  f"no recovery seen within 120 s", flush=True)
    while job.poll() is None and time.time() - started < max(1.0, args.run_timeout):
        pids |= job_processes(tag)  # the last replacements too
        time.sleep(0.05)
    if job.poll() is None:
        hung = True
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    seconds = time.time() - started
    with open(out_file, errors="replace") as f:
        text = f.read()
    accuracy = re.findall(r"test accuracy ([0-9.]+) %", text)
    time.sleep(0.5)  # the launcher's last unlinks
    left = sorted(shm_entries(pids))
    run_record = {"run": run, "mode": args.mode, "transport": args.transport,
                  "exit": job.returncode, "hung": hung, "seconds": round(seconds, 1),
                  "accuracy": float(accuracy[-1]) if accuracy else None,
                  "kills": len(kills), "recovered": sum("kill_to_step_s" in k for k in kills),
                  "shm_left": left}
    records.append(run_record)
    ok = (job.returncode == 0 and not hung and not left and run_record["accuracy"] is not None
          and run_record["accuracy"] >= args.min_accuracy
          and run_record["recovered"] == len(kills) == args.kills)
    print(f"run {run}: exit {job.returncode}, {'HUNG, ' if hung else ''}accuracy "
          f"{run_record['accuracy']} %, {seconds:.0f} s, {run_record['recovered']}/{args.kills} "
          f"kills recovered, /dev/shm left: {left or 'nothing'}{'' if ok else '  FAILED'}",
          flush=True)
    if not ok:
        print(f"  output kept in {out_file}", flush=True)
    else:
        subprocess.run(["rm", "-rf", work], check=False)
    return ok


def main():
    args = parse_args()
    if args.workers < (3 if args.mode == "two" else 2):
        sys.exit("elastic_kills.py: --mode two needs --workers 3 or more, the others 2 or more")
    tessera = os.path.join(args.build, "bin", "tessera")
    if not os.access(tessera, os.X_OK):
        sys.exit(f"elastic_kills.py: no {tessera}; build it first "
                 "(cmake --preset release && cmake --build --preset release)")
    rng = random.Random(args.seed)
    records = []
    failed = 0
    for run in range(1, args.runs + 1):
        failed += 0 if run_once(args, run, rng, records) else 1
    kills = [r for r in records if "victims" in r and "kill_to_step_s" in r]
    runs = [r for r in records if "exit" in r]
    report(records, kills, runs, failed, f"{args.mode} over {args.transport}", "", args.json)


def report(records, kills, runs, failed, what, kills_detail, json_path):
    """Appends the records to json_path (if any), prints the campaign's summary, exits."""
    if json_path:
        with open(json_path, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    if kills:
        times = [k["kill_to_step_s"] for k in kills]
        lost = [k["steps_lost"] for k in kills]
        print(f"{what}: {len(kills)} kills in {len(runs)} runs; kill to first step of the new "
              f"world: median {statistics.median(times):.3f} s, max {max(times):.3f} s; steps "
              f"lost: median {statistics.median(lost)}, max {max(lost)}; state from memory in "
              f"{sum(k['state_from'] == 'memory' for k in kills)}{kills_detail}")
    accuracies = [r["accuracy"] for r in runs if r["accuracy"] is not None]
    if accuracies:
        print(f"accuracy: min {min(accuracies):.2f} %, median {statistics.median(accuracies):.2f} %;"
              f" runs failed: {failed}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
