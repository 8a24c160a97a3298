"""Check mcore-selftest's --json lines (one per rank) in a file: every rank of the world once, at
distinct coordinates, each ok with a verified group of every kind it belongs to, every rank
advertising ADDR. Usage: python3 selftest_lines.py FILE WORLD_SIZE ADDR. Exits non-zero naming
what is wrong."""
import json
import sys

path, world, addr = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = [json.loads(l) for l in open(path) if l.startswith("{")]
ranks = sorted(l.get("rank") for l in lines)
assert ranks == list(range(world)), f"ranks {ranks}, want 0-{world - 1} once each"
bad = [l.get("rank") for l in lines if l.get("ok") is not True or l.get("world_size") != world]
assert not bad, f"rank(s) {bad} not ok"
# Each rank verified a group of every kind it belongs to (position_embedding: some ranks only).
short = [(l["rank"], l["groups"], len(l["kinds"])) for l in lines if l["groups"] != len(l["kinds"]) or l["groups"] == 0]
assert not short, f"(rank, groups verified, kinds): {short}"
need = {"tensor_model_parallel", "pipeline_model_parallel", "data_parallel"}
assert all(need <= set(l["kinds"]) for l in lines), "a rank without tp/pp/dp groups"
coords = [l["line"].split(" ok ")[1].split(" |")[0] for l in lines]
assert len(set(coords)) == world, f"coordinates not distinct: {sorted(coords)}"
addrs = {l["host"]["addr"] for l in lines}
assert addrs == {addr}, f"advertised addresses {addrs}, want {addr}"
