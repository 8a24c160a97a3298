#!/usr/bin/env python3
"""Parse per-rank JSON lines of init-benchmark runs and summarise them (stdlib only).

  summarize.py run --side NAME --world N --json OUT.json LOG [LOG...]
      Each LOG is one timed run (one world start): lines of JSON objects with a "rank" key, optionally
      prefixed by "[rank N]: " (mcore-launch). Other lines are ignored. Writes the summary to
      OUT.json and prints a one-line digest.
  summarize.py table SUMMARY.json [SUMMARY.json...]
      Prints a Markdown table of the summaries and, where both sides ran at the same world size,
      the ratio megatron/ours.

Per run: median and max over ranks of ready_since_process_start_s (process start to all groups
ready), the world span (earliest process start to latest ready, when start/ready boot times are
given), mean store round trips per rank. Over runs: the median (and min/max) of those.
"""

import argparse
import json
import re
import statistics
import sys

PREFIX = re.compile(r"^\[rank (\d+)\]: ")


def parse_log(path):
    """Return the per-rank records of one run, keyed by rank."""
    records = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = PREFIX.sub("", line.strip())
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("rank"), int):
                if rec["rank"] in records:
                    raise ValueError(f"{path}: rank {rec['rank']} reported twice")
                records[rec["rank"]] = rec
    return records


def num(rec, *keys):
    """First numeric value among keys (None when none is present)."""
    for k in keys:
        v = rec.get(k)
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            return float(v)
    return None


def group_count(rec):
    for k in ("groups_member", "groups"):
        v = rec.get(k)
        if isinstance(v, list):
            return len(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def summarize_run(path, world):
    recs = parse_log(path)
    missing = sorted(set(range(world)) - set(recs))
    if missing:
        raise ValueError(f"{path}: no result line from ranks {missing} (world {world})")
    failed = [r for r, rec in recs.items() if rec.get("ok") is False]
    if failed:
        raise ValueError(f"{path}: ranks {failed} reported ok=false")
    ready = [num(recs[r], "ready_since_process_start_s") for r in range(world)]
    if any(v is None for v in ready):
        raise ValueError(f"{path}: a rank lacks ready_since_process_start_s")
    init = [num(recs[r], "init_model_parallel_s", "init_seconds") for r in range(world)]
    init_total = [num(recs[r], "init_total_s", "init_seconds") for r in range(world)]
    rts = [num(recs[r], "store_round_trips") for r in range(world)]
    cpu = [num(recs[r], "cpu_s_at_ready") for r in range(world)]
    groups = [group_count(recs[r]) for r in range(world)]
    out = {
        "log": path,
        "ready_median_s": statistics.median(ready),
        "ready_max_s": max(ready),
        "init_median_s": median_or_none(init),
        "init_total_median_s": median_or_none(init_total),
        "cpu_median_s": median_or_none(cpu),
        "round_trips_mean": statistics.mean(rts) if None not in rts else None,
        "round_trips_max": max(rts) if None not in rts else None,
        "groups_per_rank": sorted(set(groups)) if None not in groups else None,
    }
    starts = [num(recs[r], "start_boottime_s") for r in range(world)]
    ends = [num(recs[r], "ready_boottime_s") for r in range(world)]
    if None not in starts and None not in ends:
        out["world_span_s"] = max(ends) - min(starts)
        imports = [num(recs[r], "import_s") for r in range(world)]
        if None not in imports:
            # From the moment the slowest rank has its libraries imported to all ranks ready.
            out["after_import_span_s"] = max(ends) - max(s + i for s, i in zip(starts, imports))
    return out


def median_or_none(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if len(vals) == len(values) and vals else None


def over_runs(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def cmd_run(a):
    runs = [summarize_run(p, a.world) for p in a.logs]
    count_runs = [summarize_run(p, a.world) for p in a.count_logs]
    summary = {"side": a.side, "world": a.world, "config": a.config, "runs": runs,
               "count_runs": count_runs}
    for key in ("ready_median_s", "ready_max_s", "world_span_s", "init_median_s",
                "init_total_median_s", "cpu_median_s", "after_import_span_s"):
        summary[key] = over_runs(runs, key)
    for key in ("round_trips_mean", "round_trips_max"):
        summary[key] = over_runs(runs + count_runs, key)
    groups = sorted({g for r in runs + count_runs for g in (r["groups_per_rank"] or [])})
    summary["groups_per_rank"] = groups or None
    with open(a.json, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print(f"{a.side} world={a.world}: " + digest(summary))


def fmt(stat, digits=3):
    if stat is None:
        return "-"
    return f"{stat['median']:.{digits}f}"


def digest(s):
    return (f"ready median {fmt(s['ready_median_s'])} s, max {fmt(s['ready_max_s'])} s, "
            f"init {fmt(s['init_median_s'])} s, round trips/rank {fmt(s['round_trips_mean'], 1)}"
            f" over {len(s['runs'])} runs")


def cmd_table(a):
    sums = []
    for p in a.summaries:
        with open(p, encoding="utf-8") as f:
            sums.append(json.load(f))
    print("| side | world | config | runs | ready median s | ready max s | world span s "
          "| init s | init total s | after import s | CPU s / rank "
          "| store round trips / rank (mean) "
          "| groups joined / rank |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in sums:
        print(f"| {s['side']} | {s['world']} | {s.get('config') or ''} | {len(s['runs'])} "
              f"| {fmt(s['ready_median_s'])} | {fmt(s['ready_max_s'])} "
              f"| {fmt(s.get('world_span_s'))} | {fmt(s['init_median_s'])} "
              f"| {fmt(s.get('init_total_median_s'))} | {fmt(s.get('after_import_span_s'))} "
              f"| {fmt(s.get('cpu_median_s'), 2)} "
              f"| {fmt(s['round_trips_mean'], 1)} "
              f"| {','.join(map(str, s['groups_per_rank'] or [])) or '-'} |")
    by = {(s["side"], s["world"]): s for s in sums}
    worlds = sorted({s["world"] for s in sums})
    lines = []
    for w in worlds:
        m, o = by.get(("megatron", w)), by.get(("ours", w))
        if not (m and o):
            continue
        parts = []
        for key, label in (("ready_max_s", "ready max"), ("round_trips_mean", "round trips")):
            if m.get(key) and o.get(key) and o[key]["median"] > 0:
                parts.append(f"{label} x{m[key]['median'] / o[key]['median']:.2f}")
        # Imports left out of Megatron's side: from its slowest rank's imports done to all ready,
        # against our slowest rank's whole life (process start to ready, verification included).
        after, ours_ready = m.get("after_import_span_s"), o.get("ready_max_s")
        if after and ours_ready and ours_ready["median"] > 0:
            parts.append(f"megatron after import / ours ready max x{after['median'] / ours_ready['median']:.2f}")
        lines.append(f"- world {w}: megatron/ours " + ", ".join(parts))
    if lines:
        print("\nRatios (median over runs; >1 means ours is lower):")
        print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--side", required=True)
    r.add_argument("--world", type=int, required=True)
    r.add_argument("--config", default="")
    r.add_argument("--json", required=True)
    r.add_argument("--count-logs", nargs="*", default=[],
                   help="runs whose timings are not used (store counted by a slower wrapper); "
                        "their round trips are")
    r.add_argument("logs", nargs="+")
    t = sub.add_parser("table")
    t.add_argument("summaries", nargs="+")
    a = p.parse_args()
    try:
        cmd_run(a) if a.cmd == "run" else cmd_table(a)
    except (OSError, ValueError) as e:
        sys.exit(f"summarize.py: {e}")


if __name__ == "__main__":
    main()
