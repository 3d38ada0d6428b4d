"""The library call's host side, this tree against an earlier one, in the same run: the first call (its time
and how many Python functions it runs, all and the tree's own) and the host µs of a cached call, torch and CuPy inputs.

    python -m lab.call_host --against .old [--record]

`--against` names a checkout of an earlier commit (e.g. `git worktree add .old <commit>`); each tree's
`deepgemm` is imported in a fresh interpreter of its own, with a CuPy kernel cache of its own, twice: the
first process compiles (cold), the second reads the compiled kernel back (warm), and times the host's
cost of cached calls at a shape whose GPU time is small (64^3), where the host's time is the call's time.
With --record the rows go to lab/results/h200/call_host.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from lab import record
from tutorial import results

SHAPE = (64, 64, 64)
CALLS, REPEATS = 2000, 5

CHILD = r"""
import json, sys, time
tree, framework, CALLS, REPEATS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, tree)
import cupy
m, n, k = 64, 64, 64
if framework == "torch":
    import torch
    a = torch.rand(m, k, device="cuda", dtype=torch.float16)
    b = torch.rand(n, k, device="cuda", dtype=torch.float16).T
    sync = torch.cuda.synchronize
else:
    a = cupy.random.rand(m, k).astype(cupy.float16)
    b = cupy.random.rand(n, k).astype(cupy.float16).T
    sync = cupy.cuda.Device().synchronize
sync()
import deepgemm
assert deepgemm.__file__.startswith(tree), deepgemm.__file__
calls = {"all": 0, "tree": 0}
def count(frame, event, arg):
    if event == "call":
        calls["all"] += 1
        if frame.f_code.co_filename.startswith(tree):
            calls["tree"] += 1
start = time.perf_counter()
sys.setprofile(count)
c = deepgemm.gemm(a, b)
sys.setprofile(None)
sync()
first_ms = 1e3 * (time.perf_counter() - start)
best = float("inf")
for _ in range(REPEATS):
    sync()
    start = time.perf_counter()
    for _ in range(CALLS):
        deepgemm.gemm(a, b)
    best = min(best, time.perf_counter() - start)
sync()
print(json.dumps({"first_call_ms": first_ms, "first_call_functions": calls["all"],
                  "first_call_tree_functions": calls["tree"], "host_us": 1e6 * best / CALLS}))
"""


def run_child(tree: Path, framework: str, cache: Path) -> dict:
    env = {**os.environ, "CUPY_CACHE_DIR": str(cache)}
    argv = [sys.executable, "-c", CHILD, str(tree), framework, str(CALLS), str(REPEATS)]
    done = subprocess.run(argv, capture_output=True, text=True,
                          env=env, cwd=tempfile.gettempdir())  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{tree} {framework}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(trees: dict[str, Path]) -> list[dict]:
    rows = []
    for name, tree in trees.items():
        for framework in ("torch", "cupy"):
            with tempfile.TemporaryDirectory(prefix="call-host-") as cache:
                for mode in ("cold", "warm"):
                    row = run_child(tree.resolve(), framework, Path(cache))
                    rows.append({"tree": name, "framework": framework, "mode": mode, "m": SHAPE[0], "n": SHAPE[1],
                                 "k": SHAPE[2], **row})  # fmt: skip
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="a checkout of the commit to compare with")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    rows = measure({"this": results.REPO, "against": Path(args.against)})
    if args.record:
        record("call_host", "lab.call_host", None, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
