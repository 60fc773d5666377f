#!/usr/bin/env python3
"""Compares two pipetrain checkpoint folders tensor by tensor, by name, whatever layout (stages,
replicas, processes) each was saved from. Reads the format itself (manifest.json, then each
tensor's bytes from its piece at the manifest's offset), with the standard library only.

  compare_checkpoints.py A B [--tolerance T] [--weights-only] [--quiet]

Exit 0 when both hold the same tensor names and every element agrees: bit for bit without
--tolerance, else |a - b| <= T. --weights-only: the parameters alone (no optimizer.* state, no
stash.* second weight versions of --update async). A NaN anywhere is a failure (NaN never "agrees"). Prints the
largest difference and how many tensors differ.
"""
import argparse
import array
import json
import math
import os
import sys


def tensors(folder):
    with open(os.path.join(folder, "manifest.json")) as f:
        m = json.load(f)
    if m.get("format") != "pipetrain-checkpoint-2":
        sys.exit(f"{folder}: not a pipetrain-checkpoint-2 folder")
    out = {}
    for t in m["tensors"]:
        piece = m["pieces"][t["piece"]]["file"]
        out[t["name"]] = (os.path.join(folder, piece), t["offset"], t["bytes"], t["dtype"])
    return m, out


def read(entry):
    path, offset, size, dtype = entry
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        sys.exit(f"{path}: short read")
    return data, dtype


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tolerance", type=float, default=None)
    p.add_argument("--weights-only", action="store_true")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    ma, ta = tensors(args.a)
    mb, tb = tensors(args.b)
    def kept(name):
        return not (args.weights_only and name.startswith(("optimizer.", "stash.")))

    names = sorted(n for n in ta if kept(n))
    names_b = sorted(n for n in tb if kept(n))
    if names != names_b:
        only_a = sorted(set(names) - set(names_b))[:5]
        only_b = sorted(set(names_b) - set(names))[:5]
        print(f"FAIL: the tensor names differ (only in A: {only_a}, only in B: {only_b})")
        return 1
    worst, differing, nan = 0.0, 0, 0
    for n in names:
        da, dt_a = read(ta[n])
        db, dt_b = read(tb[n])
        if dt_a != dt_b:
            print(f"FAIL: {n} is {dt_a} in A and {dt_b} in B")
            return 1
        if dt_a != "F32":
            if da != db:
                differing += 1
                worst = math.inf
            continue
        fa, fb = array.array("f"), array.array("f")
        fa.frombytes(da)
        fb.frombytes(db)
        has_nan = any(math.isnan(x) for x in fa) or any(math.isnan(x) for x in fb)
        if has_nan:
            nan += 1
        if da == db and not has_nan:
            continue
        differing += 1
        d = max((abs(x - y) for x, y in zip(fa, fb)), default=0.0)
        if has_nan or math.isnan(d):
            d = math.inf
        worst = max(worst, d)
        if not args.quiet:
            print(f"  {n}: max |A - B| = {d:.3g}")
    step_a, step_b = ma["metadata"].get("step"), mb["metadata"].get("step")
    verdict = (differing == 0) if args.tolerance is None else (nan == 0 and worst <= args.tolerance)
    what = "bit-identical" if differing == 0 else f"{differing} of {len(names)} tensors differ, largest difference {worst:.3g}"
    if nan:
        what += f", {nan} tensors hold NaN"
    print(f"{'ok' if verdict else 'FAIL'}: {len(names)} tensors (steps {step_a} and {step_b}): {what}"
          + ("" if args.tolerance is None else f" (tolerance {args.tolerance:g})"))
    if step_a != step_b:
        print("FAIL: the checkpoints are of different steps")
        return 1
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
