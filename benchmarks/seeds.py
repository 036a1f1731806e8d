"""The seed tutorials' programs (``tests/test_seed_*.py``): this checkout against a baseline
revision, in the same run.

Each tree runs its own seed test files with pytest (in a subprocess, importing its own
``symtape``); every test's call duration is recorded at full resolution, the best of
``--repeat`` runs is kept, and the two are printed side by side with the speed-up. Tests
whose baseline run takes at least ``--min`` seconds are the programs the speed-up is judged
on; shorter ones are printed below them (their times are mostly fixed costs).

    python benchmarks/seeds.py                    # against v0.1 (one baseline run)
    python benchmarks/seeds.py --baseline HEAD~5 --repeat 3

``v0.1`` is the tag of the 0.1 release (commit 20a360b).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def durations(tree: pathlib.Path, repeat: int) -> dict:
    """``nodeid -> best call duration`` of the seed tests of ``tree``."""
    best: dict = {}
    files = sorted(str(p.relative_to(tree)) for p in (tree / "tests").glob("test_seed_*.py"))
    for _ in range(repeat):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        env = dict(os.environ, SYMTAPE_DURATIONS=out,
                   PYTHONPATH=os.pathsep.join([str(tree), str(ROOT / "benchmarks")]))
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "_durations", "-o", "addopts=", *files], cwd=tree, env=env,
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            for k, v in json.load(f).items():
                best[k] = min(v, best.get(k, v))
        os.unlink(out)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="v0.1", help="git revision to compare with")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tree (best kept)")
    ap.add_argument("--min", type=float, default=0.1, help="baseline seconds of a program")
    args = ap.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="symtape-baseline-"))
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(work)], check=True)
        if subprocess.run(["git", "checkout", "-q", args.baseline], cwd=work).returncode:
            sys.exit(f"seeds.py: no revision {args.baseline!r} in this repository; give one "
                     "with --baseline (0.1 is commit 20a360b)")
        base = durations(work, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    now = durations(ROOT, args.repeat)

    rows = sorted(((b, now[k], k.split("::")[-1]) for k, b in base.items() if k in now),
                  reverse=True)
    print(f"seed tests: {args.baseline} against this checkout (best of {args.repeat})")
    print(f"{'baseline s':>11} {'now s':>9} {'speed-up':>9}  test")
    worst = None
    for i, (b, n, name) in enumerate(rows):
        if i and b < args.min <= rows[i - 1][0]:
            print(f"  -- shorter than {args.min} s in {args.baseline} --")
        print(f"{b:>11.3f} {n:>9.4f} {b / n:>8.1f}x  {name}")
        if b >= args.min:
            worst = min(worst or b / n, b / n)
    total_b = sum(r[0] for r in rows)
    total_n = sum(r[1] for r in rows)
    print(f"{total_b:>11.3f} {total_n:>9.4f} {total_b / total_n:>8.1f}x  all seed tests")
    if worst is not None:
        print(f"slowest speed-up among programs of at least {args.min} s: {worst:.1f}x")


if __name__ == "__main__":
    main()
