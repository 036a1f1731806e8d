"""Any benchmark script run against another revision of symtape in the same run.

The script runs alternately under this checkout and under a clone of ``--baseline`` (each
with its own ``PYTHONPATH``), ``--repeat`` times each. Lines of its output are matched by
their text with the numbers taken out, under their heading (:func:`timings`); for every
value the table shows the baseline's and this checkout's best and median, and the ratio
now/baseline of each (below 1: faster now).
A structural change is within budget when the ratios stay under 1.10.

    python benchmarks/versus.py --baseline daa26bb --repeat 3 -- benchmarks/eager.py --quick
    python benchmarks/versus.py --baseline daa26bb -- benchmarks/peers.py --tools symtape
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*(ns|µs|us|ms|s)\b")
SCALE = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}


ANY = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def timings(text: str) -> dict:
    """``{line with its numbers blanked: [value, ...]}`` for each output line with numbers:
    a number with a unit (``s``, ``ms``, ``µs``/``us``, ``ns``) in seconds; in a table row
    without units (a heading above names them) the first number labels the row and the
    others are its values. Lines are keyed under their heading (the last other line)."""
    out, heading = {}, ""
    for line in text.splitlines():
        found = NUMBER.findall(line)
        plain = ANY.findall(line)
        if found:
            values = [float(v) * SCALE[u] for v, u in found]
            key = " ".join(ANY.sub("#", line).split())
        elif len(plain) > 1 and not ANY.sub("", line).strip():  # a table row
            values = [float(v) for v in plain[1:]]
            key = f"row {plain[0]}"
        else:  # the section the next lines belong to
            heading = " ".join(ANY.sub("#", line).split()) or heading
            continue
        key = f"{heading[:30]} | {key}"
        while key in out:  # repeated lines keep their order
            key += " '"
        out[key] = values
    return out


def run(tree: pathlib.Path, script: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), SYMTAPE_CACHE_DIR=tempfile.mkdtemp())
    done = subprocess.run([sys.executable, str(ROOT / script[0]), *script[1:]], cwd=tree,
                          env=env, capture_output=True, text=True, check=False)
    shutil.rmtree(env["SYMTAPE_CACHE_DIR"], ignore_errors=True)
    if done.returncode:
        sys.exit(f"versus.py: {script[0]} failed under {tree}:\n{done.stderr[-2000:]}")
    return timings(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="git revision to compare with")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tree")
    ap.add_argument("script", nargs="+", help="benchmark script and its arguments (after --)")
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="symtape-versus-"))
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(work)], check=True)
        if subprocess.run(["git", "checkout", "-q", args.baseline], cwd=work).returncode:
            sys.exit(f"versus.py: no revision {args.baseline!r} in this repository")
        base, now = [], []
        for _ in range(args.repeat):  # alternate, so drifts of a noisy machine hit both
            base.append(run(work, args.script))
            now.append(run(ROOT, args.script))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{' '.join(args.script)}: {args.baseline} against this checkout, "
          f"{args.repeat} runs each; ratio now/baseline of best and of median, the best "
          "values (seconds where the line gives units), which value of the line, the line")
    worst = []
    for key in base[0]:
        if not all(key in r and len(r[key]) == len(base[0][key]) for r in base + now):
            continue
        for i in range(len(base[0][key])):
            b = [r[key][i] for r in base]
            n = [r[key][i] for r in now]
            if min(b) <= 0:
                continue
            best, med = min(n) / min(b), statistics.median(n) / statistics.median(b)
            worst.append(best)
            print(f"  {best:5.2f} {med:5.2f}   {min(b):.3g} -> {min(n):.3g}   [{i}] {key[:90]}")
    if worst:
        print(f"worst best-ratio {max(worst):.2f}, geometric mean "
              f"{statistics.geometric_mean(worst):.2f}")


if __name__ == "__main__":
    main()
