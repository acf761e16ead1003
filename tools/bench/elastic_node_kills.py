#!/usr/bin/env python3
"""Whole-node kill campaign for elastic training (issue 15): the kill of a "node" of a two-node job.

Two network namespaces joined by a veth pair stand for two hosts (as
tests/multihost/two_host_train_test.cpp makes them); each launcher also gets pid and UTS
namespaces of its own (a host name, and pids the other node cannot see from inside). Each runs its own `tessera launch
--nnodes 2 --node-rank R --elastic` with --workers-per-node workers (2 by default, 4 in all)
training samples/configs/elastic.ini (Fashion-MNIST, elastic around ddp) over ucx with
UCX_TLS=tcp,self, so the workers of the two nodes talk TCP across the link. At random steps the
script kills one node whole: it SIGSTOPs every process in that namespace (the launcher and its
workers, so that none of them reacts to the others' deaths), then SIGKILLs them all; the
workers on the other node must notice, regroup with min_workers = --workers-per-node, and finish
the run.

  elastic_node_kills.py --build build/ci --runs 5 --kills 2 --epochs 6          # tcp store on node 0
  elastic_node_kills.py --build build/ci --store file --runs 5 --kills 2       # either node killed
  elastic_node_kills.py --build build/ci --cut-link ...                       # the node goes silent

--store tcp: node 0's launcher serves the job's tcp store on its side of the link; killing it
would take the store with it (and, by design, every other node stops when node 0 is gone), so
only node 1 is killed. --store file: the job meets in a folder both nodes see (the shared file
system stands for NFS), and the node killed is drawn at random, node 0 and rank 0 included.
--kills K > 1: after each kill but the last, a launcher with --join starts the killed node's
workers again in its namespace, and the next kill waits until they are admitted (the world is
whole again). A run can end first (the joiners take seconds to start, and two workers finish the
rest of a 6-epoch run in about 10 s): that kill is not struck, which the run's line says, and it
is no failure. --cut-link: the killed node's end of the link goes down before its processes are
stopped, so the survivors get no FIN or RST from the kernel when the killed processes' sockets
close: a node that loses power or its network, noticed only when its leases run out
(failure_timeout) or a send fails.

Per kill: the time from the strike (taken before the link goes down and the first SIGSTOP) to
the first step completed by the world of the survivors (the metrics file's wall_time of the
first step after the one that world went on from), the steps lost (steps done when the failure was noticed minus the step the new world went
on from, summed over the generations it took), how many generations it took, where the state
came from. Per run: every launcher's exit code (the killed ones' are -9), test accuracy, time,
/dev/shm entries left (listed from inside each namespace), a file store's folder left, and how
long the surviving node 0's launcher went on after the run's last step (it waits for the killed
node's "finished" key, up to 60 s). Prints one line per kill and per run, then medians and
maxima, and exits 1 when a run fails, hangs, leaves something in /dev/shm or ends below
--min-accuracy. Needs root (ip netns) and a built tessera. The namespaces are deleted at the end
of each run and on any exit of the script (SIGINT and SIGTERM included).
"""
import argparse
import atexit
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_kills import (ROOT, events, first_step_after, job_workers,  # noqa: E402
                           metrics, report)

ADDRESSES = ("169.254.78.1", "169.254.78.2")
STORE_PORT = 29578  # inside a fresh namespace nothing else listens there
NAMESPACES = []  # created and not yet deleted, for the exit handlers


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--kills", type=int, default=2, help="node kills per run")
    p.add_argument("--workers-per-node", type=int, default=2)
    p.add_argument("--store", choices=["tcp", "file"], default="tcp")
    p.add_argument("--cut-link", action="store_true",
                   help="take the killed node's end of the link down before killing it")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--seed", type=int, default=1, help="of the kill schedule")
    p.add_argument("--min-accuracy", type=float, default=88.0, help="percent")
    p.add_argument("--run-timeout", type=float, default=600.0,
                   help="seconds before a run counts as hung")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="extra config override for every run")
    p.add_argument("--json", help="append every kill and run record to this JSON Lines file")
    p.add_argument("--keep", action="store_true", help="keep every run's folder (logs, metrics)")
    return p.parse_args()


def sh(*command, check=True):
    return subprocess.run(command, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def netns_pids(name):
    out = sh("ip", "netns", "pids", name, check=False).stdout
    return [int(p) for p in out.split()]


def delete_namespaces():
    for name in list(NAMESPACES):
        for pid in netns_pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sh("ip", "netns", "del", name, check=False)
        NAMESPACES.remove(name)


def on_signal(signum, _frame):
    delete_namespaces()
    sys.exit(128 + signum)


def create_namespaces(run):
    """Two namespaces a, b joined by a veth pair (a: ADDRESSES[0], b: ADDRESSES[1])."""
    suffix = f"{os.getpid()}-{run}"
    names = (f"tessera-nk-{suffix}-a", f"tessera-nk-{suffix}-b")
    veths = (f"tnk{os.getpid() % 100000}{run % 100}a", f"tnk{os.getpid() % 100000}{run % 100}b")
    for name in names:
        sh("ip", "netns", "add", name)
        NAMESPACES.append(name)
    sh("ip", "link", "add", veths[0], "netns", names[0], "type", "veth", "peer", "name",
       veths[1], "netns", names[1])
    for name, veth, address in zip(names, veths, ADDRESSES):
        sh("ip", "-n", name, "addr", "add", f"{address}/30", "dev", veth)
        sh("ip", "-n", name, "link", "set", veth, "up")
        sh("ip", "-n", name, "link", "set", "lo", "up")
    wait_for_carrier(names, veths)
    return names, veths


def wait_for_carrier(names, veths):
    # UCX's tcp transport calls a peer unreachable over a link without carrier yet.
    until = time.time() + 10
    while True:
        shown = [sh("ip", "-n", n, "link", "show", v).stdout for n, v in zip(names, veths)]
        if all("LOWER_UP" in s and "NO-CARRIER" not in s for s in shown):
            return
        if time.time() > until:
            raise RuntimeError("the veth pair between the namespaces never got a carrier")
        time.sleep(0.02)


def shm_entries(names):
    """tessera entries of /dev/shm as each namespace sees it (ip netns exec keeps the host's)."""
    seen = set()
    for name in names:
        out = sh("ip", "netns", "exec", name, "ls", "-1", "/dev/shm", check=False).stdout
        seen |= {e for e in out.split() if e.startswith("tessera")}
    return seen


def kill_node(name, veth, cut_link):
    """Stops every process of the namespace, then SIGKILLs them all. Returns (pids, seconds)."""
    if cut_link:
        sh("ip", "-n", name, "link", "set", veth, "down")
    stopped = set()
    while True:  # until no process appears that was not stopped (a launcher forking a worker)
        fresh = [p for p in netns_pids(name) if p not in stopped]
        if not fresh:
            break
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            stopped.add(pid)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(stopped)


def all_events(work):
    found = []
    for name in sorted(os.listdir(work)):
        if name.startswith("out-"):
            found += events(os.path.join(work, name))
    return sorted(found, key=lambda m: int(m.group(1)))


def run_once(args, run, rng, records):
    work = tempfile.mkdtemp(prefix="tessera-node-kills-")
    metrics_file = os.path.join(work, "metrics.jsonl")
    tag = f"{os.getpid()}.{run}"
    token = secrets.token_hex(16)
    per_node = args.workers_per_node
    workers = 2 * per_node
    tessera = os.path.join(args.build, "bin", "tessera")
    names, veths = create_namespaces(run)
    if args.store == "tcp":
        store = f"{ADDRESSES[0]}:{STORE_PORT}"
        store_dir = None
    else:
        store_dir = os.path.join(work, "store")
        os.makedirs(store_dir)
        store = f"file://{store_dir}"
    env = dict(os.environ)
    env.update({"ELASTIC_KILLS_JOB": tag, "UCX_TLS": "tcp,self", "UCX_WARN_UNUSED_ENV_VARS": "n",
                "TESSERA_STORE_TOKEN": token})
    train = [tessera, "train", "--config", os.path.join(ROOT, "samples", "configs", "elastic.ini"),
             "--runtime.transport=ucx", "--runtime.store=tcp",
             f"--train.epochs={args.epochs}", "--train.schedule=cosine",
             "--train.checkpoint_dir=", "--train.checkpoint_every=0",
             f"--train.metrics_file={metrics_file}", "--train.progress=off",
             "--elastic.copies=1"] + [f"--{s}" for s in args.set]
    elastic = ["--elastic", "--min-workers", str(per_node), "--max-workers", str(workers),
               "--timeout", f"{int(args.run_timeout)}s"]
    launchers = []  # [node, Popen, out file, killed]

    def start(node, join):
        index = sum(1 for entry in launchers if entry[0] == node)
        out_file = os.path.join(work, f"out-{'ab'[node]}{index}.txt")
        where = (["--join"] if join else ["--nnodes", "2", "--node-rank", str(node)])
        # Its own pid and UTS namespaces too: the ucx transport takes ranks with the same boot id
        # and pid namespace for ranks of one host (it then watches their pids), and a joining
        # launcher names its workers after the host name and its pid.
        host = f"node-{'ab'[node]}{index}"
        command = (["ip", "netns", "exec", names[node], "unshare", "--pid", "--fork",
                    "--mount-proc", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host,
                    tessera, "launch"] + where +
                   ["--store", store, "-n", str(per_node)] + elastic + ["--"] + train +
                   # the workers this launcher starts (elastic.ini says 3)
                   [f"--runtime.world_size={per_node if join else workers}"])
        with open(out_file, "w") as out:
            job = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
        launchers.append([node, job, out_file, False])

    shm_before = shm_entries(names)
    started = time.time()
    start(0, False)
    start(1, False)
    steps_per_epoch = 60000 // (64 * workers)
    total = steps_per_epoch * args.epochs
    kill_steps = sorted(rng.sample(range(steps_per_epoch // 2, total - steps_per_epoch),
                                   args.kills))
    kills = []
    hung = False
    unstruck = 0  # kills not made: the run ended before the rejoined node was admitted

    def live():
        return [entry for entry in launchers if entry[1].poll() is None]

    for number, kill_step in enumerate(kill_steps, 1):
        while True:  # the step reached with the whole world, every worker admitted
            if not live():
                break
            if time.time() - started > args.run_timeout:
                hung = True
                break
            done = metrics(metrics_file)
            seen = all_events(work)
            world = int(seen[-1].group(2)) if seen else workers
            if (done and done[-1]["step"] >= kill_step and world == workers
                    and len(job_workers(f"ELASTIC_KILLS_JOB={tag}")) == workers):
                break
            time.sleep(0.02)
        if hung:
            break
        if not live():
            unstruck = len(kill_steps) - number + 1
            break
        node = 1 if args.store == "tcp" else rng.randrange(2)
        seen = all_events(work)
        generation_before = int(seen[-1].group(1)) if seen else 0
        before = metrics(metrics_file)
        last_step = before[-1]["step"] if before else 0
        struck = [entry for entry in live() if entry[0] == node]
        killed_at = time.time()
        pids = kill_node(names[node], veths[node], args.cut_link)
        kill_s = time.time() - killed_at
        for entry in struck:
            entry[3] = True
        record = {"run": run, "store": args.store, "cut_link": args.cut_link,
                  "node": node, "processes_killed": len(pids), "kill_s": round(kill_s, 4),
                  "step_at_kill": last_step}
        while live() and time.time() - killed_at < 120:
            after_kill = [m for m in all_events(work) if int(m.group(1)) > generation_before]
            failures = [m for m in after_kill if m.group(5) is not None]
            final = next((m for m in failures if int(m.group(2)) == per_node), None)
            if final:
                resumed = int(final.group(6))
                first = first_step_after(metrics_file, resumed, killed_at)
                if first:
                    upto = [m for m in failures if int(m.group(1)) <= int(final.group(1))]
                    record.update({
                        "generation": int(final.group(1)),
                        "generations": len([m for m in after_kill
                                            if int(m.group(1)) <= int(final.group(1))]),
                        "left": final.group(3),
                        "failed_at_step": int(upto[0].group(5)),
                        "resumed_at_step": resumed,
                        "steps_lost": sum(int(m.group(5)) - int(m.group(6)) for m in upto),
                        "state_from": final.group(8),
                        "regroup_s": float(final.group(9)),
                        "kill_to_step_s": first["wall_time"] - killed_at,
                    })
                    break
            time.sleep(0.01)
        kills.append(record)
        records.append(record)
        if "kill_to_step_s" in record:
            print(f"run {run} kill {number}: node {node} ({len(pids)} processes) at step "
                  f"{last_step}: first step of generation {record['generation']} "
                  f"({record['generations']} generation(s)) after {record['kill_to_step_s']:.3f} s "
                  f"(regroup {record['regroup_s']:.2f} s), steps lost {record['steps_lost']}, "
                  f"state from {record['state_from']}", flush=True)
        else:
            print(f"run {run} kill {number}: node {node} ({len(pids)} processes) at step "
                  f"{last_step}: no recovery seen within 120 s", flush=True)
        if number < len(kill_steps) and live():
            if args.cut_link:
                sh("ip", "-n", names[node], "link", "set", veths[node], "up")
                wait_for_carrier(names, veths)
            start(node, True)

    ended = {}  # launcher index: when it exited
    while len(ended) < len(launchers):
        for i, entry in enumerate(launchers):
            if i not in ended and entry[1].poll() is not None:
                ended[i] = time.time()
        if time.time() - started > args.run_timeout + 30:
            hung = True
            break
        time.sleep(0.05)
    seconds = time.time() - started
    codes = [entry[1].returncode for entry in launchers]
    text = ""
    for entry in launchers:
        with open(entry[2], errors="replace") as f:
            text += f.read()
    accuracy = None
    for line in text.splitlines():
        if "test accuracy" in line:
            accuracy = float(line.split("test accuracy", 1)[1].split("%")[0])
    done = metrics(metrics_file)
    survivors_ok = True
    for entry in launchers:
        if entry[3]:
            survivors_ok &= entry[1].returncode == -signal.SIGKILL
        else:
            survivors_ok &= entry[1].returncode == 0
    time.sleep(0.5)
    left = sorted(shm_entries(names) - shm_before)
    store_left = bool(store_dir) and any(os.scandir(store_dir))
    # How long the launchers went on after the run's last step (node 0 waits for the killed
    # node's "finished" key).
    tail_s = round(max(ended.values()) - done[-1]["wall_time"], 1) if done and ended else None
    delete_namespaces()
    run_record = {"run": run, "store": args.store, "cut_link": args.cut_link, "exits": codes,
                  "hung": hung, "seconds": round(seconds, 1), "accuracy": accuracy,
                  "steps": done[-1]["step"] if done else None,
                  "kills": len(kills), "recovered": sum("kill_to_step_s" in k for k in kills),
                  "not_struck": unstruck,
                  "shm_left": left, "store_folder_left": store_left,
                  "after_last_step_s": tail_s,
                  "node0_waited": "have not reported their workers finished" in text}
    records.append(run_record)
    ok = (survivors_ok and not hung and not left and accuracy is not None
          and accuracy >= args.min_accuracy and kills
          and run_record["recovered"] == len(kills) == args.kills - unstruck)
    print(f"run {run}: exits {codes}, {'HUNG, ' if hung else ''}accuracy {accuracy} %, "
          f"{seconds:.0f} s ({tail_s} s after the last step), {run_record['recovered']}/"
          f"{len(kills)} kills recovered"
          f"{f' ({unstruck} not struck: the run ended before the node was back)' if unstruck else ''}"
          f", /dev/shm left: {left or 'nothing'}"
          f"{', store folder left' if store_left else ''}{'' if ok else '  FAILED'}", flush=True)
    if not ok or args.keep:
        print(f"  output kept in {work}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return ok


def main():
    args = parse_args()
    if os.geteuid() != 0:
        sys.exit("elastic_node_kills.py: needs root (ip netns)")
    if args.kills < 1 or args.workers_per_node < 1:
        sys.exit("elastic_node_kills.py: --kills and --workers-per-node must be at least 1")
    tessera = os.path.join(args.build, "bin", "tessera")
    if not os.access(tessera, os.X_OK):
        sys.exit(f"elastic_node_kills.py: no {tessera}; build it first")
    atexit.register(delete_namespaces)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    rng = random.Random(args.seed)
    records = []
    failed = 0
    for run in range(1, args.runs + 1):
        try:
            failed += 0 if run_once(args, run, rng, records) else 1
        finally:
            delete_namespaces()
    kills = [r for r in records if "node" in r and "kill_to_step_s" in r]
    runs = [r for r in records if "exits" in r]
    what = f"node kills over ucx/tcp, {args.store} store{', link cut' if args.cut_link else ''}"
    nodes = (f"; nodes killed: {sum(k['node'] == 0 for k in kills)} x node 0, "
             f"{sum(k['node'] == 1 for k in kills)} x node 1")
    report(records, kills, runs, failed, what, nodes, args.json)


if __name__ == "__main__":
    main()
