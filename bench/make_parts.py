#!/usr/bin/env python3
"""Partial reports for timing `batchcheck merge` at scale (issue 15): PARTS parts of STEPS steps
each, made from one real part (`scan --shard 0/1`): the first and last step keep the template's
journal lines (with their shapes), every other step is a clean row of the template's first row
with its own step, batch and varied statistics (as real batches have).
Usage: make_parts.py TEMPLATE.json OUT_DIR PARTS STEPS"""
import copy
import json
import os
import random
import sys


def main():
    template, out_dir, parts, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t = json.load(open(template))
    total = parts * steps
    t["start"]["replay_steps"] = total
    shaped = t["steps"][0]["lines"]
    row = t["clean"]["rows"].split("\n")[0].split(" ")
    rng = random.Random(0)
    os.makedirs(out_dir, exist_ok=True)
    for k in range(parts):
        p = copy.deepcopy(t)
        p["shard"] = {"index": k, "count": parts, "source": "--shard"}
        lines, rows = [], []
        for s in range(k, total, parts):
            if s in (0, total - 1):
                b, e = copy.deepcopy(shaped[0]), copy.deepcopy(shaped[1])
                b["at"]["step"] = b["at"]["batch"] = e["step"] = e["shapes"]["index"] = s
                lines.append({"step": s, "lines": [b, e]})
                continue
            r = list(row)
            r[0] = r[2] = str(s)
            lo, hi = -rng.random() * 2, rng.random() * 2
            r[6], r[7], r[9] = repr(lo), repr(hi), repr(0.5 + rng.random() / 2)
            rows.append(" ".join(r))
        p["steps"] = lines
        p["clean"]["rows"] = "".join(r + "\n" for r in rows)
        with open(os.path.join(out_dir, f"part-{k}.json"), "w") as f:
            json.dump(p, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
