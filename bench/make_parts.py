#!/usr/bin/env python3
"""Partial reports for timing `batchcheck merge` at scale (issue 15): PARTS parts of STEPS steps
each, made from one real part (`scan --shard 0/1`) by repeating its first step's journal lines
under new step numbers. Usage: make_parts.py TEMPLATE.json OUT_DIR PARTS STEPS"""
import copy
import json
import os
import sys


def main():
    template, out_dir, parts, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t = json.load(open(template))
    total = parts * steps
    t["start"]["replay_steps"] = total
    begin, end = t["steps"][0]["lines"][:2]
    os.makedirs(out_dir, exist_ok=True)
    for k in range(parts):
        p = copy.deepcopy(t)
        p["shard"] = {"index": k, "count": parts, "source": "--shard"}
        lines = []
        for s in range(k, total, parts):
            b = copy.deepcopy(begin)
            b["at"]["step"] = s
            b["at"]["batch"] = s
            e = dict(end)
            e["step"] = s
            e["shapes"] = None if s > 0 else end["shapes"]
            lines.append({"step": s, "lines": [b, e]})
        p["steps"] = lines
        with open(os.path.join(out_dir, f"part-{k}.json"), "w") as f:
            json.dump(p, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
