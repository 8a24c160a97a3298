"""Fault-injection trials: Gloo worlds of real mcore-selftest processes in which one rank SIGKILLs
or SIGSTOPs itself at a chosen point (mcore-selftest --fault). Checks, for every survivor, that it
ended within the init timeout T + 2 s of its call to initialize (a failing rank's JSON line says
when that was after its process started: `init_began_s`; the teardown after the error counts) and,
when it failed, that its message names the victim's rank. Prints one line per trial and a closing 'faults: N passed, M failed' line.

    python3 fault_trials.py --selftest target/release/mcore-selftest --plugin-dir target/gloo-plugin \\
        [--trials 32] [--seed 23] [--timeout 5] [--worlds 8,16] [--json-out FILE]
        [--victim RANK] [--after-kill S] [--expect TEXT]

With --after-kill S (a victim killed, not stopped), every survivor must also end within S seconds of
the victim's death (its exit as this harness sees it): our store notices a killed rank's connection
closing, so survivors need not wait for their deadline.

A trial passes when every survivor ended in time and every failing survivor named the victim.
Trials are drawn from a fixed seed: victim (rank 0 in every third trial, else a random rank),
point (start, checkin, created, verify, destroy, recover) and signal (kill, stop). At `recover`
another rank is killed after init (--fail-rank) and the victim goes as the survivors begin to
recover; their bound is the chain's: T (init) + the detection window (3 s) + T (re-forming) + 2 s.
"""

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

from ports import free_port  # scripts/lib/ports.py: MCORE_PORT_RANGE when set

POINTS = ["start", "checkin", "created", "verify", "destroy", "recover"]
WINDOW_S = 3.0  # recovery's default detection window (docs/recovery.md)
SIGNALS = ["kill", "stop"]
GRACE_S = 2.0  # the bound: every wait ends within its deadline + 2 s


def names_rank(message: str, rank: int) -> bool:
    """Whether `message` names `rank` as a rank: 'rank 5', 'ranks [3, 5]', 'ranks 3, 5', 'rank 0 on host'."""
    pattern = rf"rank(?:s|\(s\))?\W{{1,3}}(?:\d+\W{{1,3}}){{0,64}}?{rank}\b(?!\.\d)"
    return re.search(pattern, message) is not None


def _init_began(out: str) -> float:
    """Seconds from the process's start to its first initialize call (0 when not reported)."""
    line = next((l for l in out.splitlines() if l.startswith("{")), "")
    try:
        began = json.loads(line).get("init_began_s") if line else None
    except ValueError:
        began = None
    return began if isinstance(began, (int, float)) and 0 <= began < 60 else 0.0


def run_trial(i, world, victim, point, sig, a, rng):
    port = free_port()
    env_base = dict(os.environ)
    env_base.update({
        "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "LD_LIBRARY_PATH": a.plugin_dir + (":" + os.environ["LD_LIBRARY_PATH"] if "LD_LIBRARY_PATH" in os.environ else ""),
    })
    argv = [a.selftest, "--json", "--backend", a.backend, "--timeout", str(a.timeout), "--tp", "2", "--pp", "2",
            "--fault", f"{victim}:{point}:{sig}"]
    # A fault during recovery: rank `failed` is killed after init (--fail-rank, by rank 0) and the
    # victim goes as the survivors begin to recover. The chain's deadline: init (T), then the
    # recovery's detection window and its re-forming (T).
    failed, bound = None, a.timeout + GRACE_S
    if point == "recover":
        failed = rng.choice([r for r in range(1, world) if r != victim])
        argv += ["--fail-rank", str(failed)]
        bound = 2 * a.timeout + WINDOW_S + GRACE_S
    procs, starts = [], []
    for r in range(world):
        env = dict(env_base, RANK=str(r), LOCAL_RANK=str(r))
        starts.append(time.monotonic())
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True))
    hard = time.monotonic() + a.timeout * 4 + 30  # the harness's own bound: it never hangs
    ends = [None] * world
    while time.monotonic() < hard:
        for r, p in enumerate(procs):
            if ends[r] is None and p.poll() is not None:
                ends[r] = time.monotonic()
        if all(ends[r] is not None for r in range(world) if r not in (victim, failed)):
            break
        time.sleep(0.005)
    for r, p in enumerate(procs):
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    outs = []
    for p in procs:
        out, err = p.communicate()
        outs.append((p.returncode, out.decode(errors="replace"), err.decode(errors="replace")))
    survivors, late, unnamed, worst = 0, [], [], 0.0
    for r in range(world):
        if r in (victim, failed):
            continue
        survivors += 1
        # The deadline counts from the rank's call to initialize (its JSON error line says when
        # that was, after the process started); everything after it is timed, teardown included.
        began = _init_began(outs[r][1])
        took = (ends[r] if ends[r] is not None else float("inf")) - starts[r] - began
        worst = max(worst, took)
        if took > bound:
            late.append((r, round(took, 2)))
        elif a.after_kill and sig == "kill" and ends[victim] is not None and ends[r] - ends[victim] > a.after_kill:
            late.append((r, f"{ends[r] - ends[victim]:.2f} s after the kill"))
        code, out, err = outs[r]
        if code != 0:
            line = next((l for l in out.splitlines() if l.startswith("{")), "")
            message = json.loads(line).get("error", "") if line else err
            if not names_rank(message, victim) or (a.expect and a.expect not in message):
                unnamed.append((r, message[:300]))
    ok = not late and not unnamed
    record = {"trial": i, "world": world, "victim": victim, "point": point, "signal": sig, "ok": ok,
              "fail_rank": failed, "bound_s": bound,
              "survivors": survivors, "failed_survivors": sum(1 for r in range(world) if r not in (victim, failed) and outs[r][0] != 0),
              "worst_end_s": round(worst, 3), "late": late, "unnamed": unnamed,
              "ends_s": {r: round(ends[r] - starts[r], 3) for r in range(world) if r not in (victim, failed) and ends[r] is not None},
              "after_kill_s": {r: round(ends[r] - ends[victim], 3) for r in range(world)
                               if r not in (victim, failed) and ends[r] is not None and ends[victim] is not None}}
    return record


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--selftest", required=True)
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--backend", default="gloo", help="the backend under test (its plugin in --plugin-dir)")
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--seed", type=int, default=23)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--worlds", default="8,16")
    p.add_argument("--only", default="", help="POINT:SIGNAL[,..]: these in turn instead of a draw")
    p.add_argument("--victim", type=int, default=None, help="the rank to fault in every trial")
    p.add_argument("--after-kill", type=float, default=0.0, help="bound on each survivor's end after a kill (s)")
    p.add_argument("--expect", default="", help="text every failing survivor's message must hold too")
    p.add_argument("--json-out", default="")
    a = p.parse_args()
    rng = random.Random(a.seed)
    worlds = [int(w) for w in a.worlds.split(",")]
    only = [tuple(x.split(":")) for x in a.only.split(",") if x]
    records = []
    for i in range(a.trials):
        world = worlds[i % len(worlds)]
        victim = a.victim if a.victim is not None else 0 if i % 3 == 0 else rng.randrange(1, world)
        point, sig = only[i % len(only)] if only else (rng.choice(POINTS), rng.choice(SIGNALS))
        rec = run_trial(i, world, victim, point, sig, a, rng)
        records.append(rec)
        status = "ok  " if rec["ok"] else "FAIL"
        extra = f" (rank {rec['fail_rank']} killed after init)" if rec["fail_rank"] is not None else ""
        print(f"{status} trial {i:2d}: world {world:2d}, rank {victim:2d} {sig:4s} at {point:8s}{extra}: "
              f"{rec['survivors']} survivors ({rec['failed_survivors']} failed), worst end {rec['worst_end_s']:.2f} s"
              + (f", worst {max(rec['after_kill_s'].values()):.2f} s after the kill"
                 if a.after_kill and rec["after_kill_s"] else "")
              + (f"; late {rec['late']}" if rec["late"] else "")
              + (f"; victim not named by {rec['unnamed'][:2]}" if rec["unnamed"] else ""), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(records, f, indent=1)
    passed = sum(r["ok"] for r in records)
    worst = max(r["worst_end_s"] for r in records) if records else 0.0
    survivors = sum(r["survivors"] for r in records)
    print(f"faults: {len(records)} trials, {survivors} survivors, worst end {worst:.2f} s "
          f"(bound {a.timeout + GRACE_S:.1f} s; {2 * a.timeout + WINDOW_S + GRACE_S:.1f} s for a fault during recovery), "
          f"seed {a.seed}")
    print(f"faults: {passed} passed, {len(records) - passed} failed")
    return 0 if passed == len(records) else 1


if __name__ == "__main__":
    sys.exit(main())
