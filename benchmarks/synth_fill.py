"""Synthetic data from data that fill their bounds: what the KD-tree paper's experiments never test.

    nice python benchmarks/synth_fill.py --label after [--keys 3] [--methods grid,kdtree,...]

Balog et al.'s mixtures (Figure 3) fill a small part of their box, [-1000, 1200]^d. Users' data
usually fill theirs: standardised columns in a box of a few standard deviations, or the box of
:func:`dpm_jax.bounds` (private bounds). Here: 100,000 points, uniform on [0, 1]^d or N(0, I)
within [-5, 5]^d, d = 2, 5, 10, epsilon 0.1 and 1 (add/remove-one, delta 1e-6, the default
SynthConfig), every tree method. Per configuration, medians over --keys keys of:

* cells: released cells;
* covered: the share of the data inside the released boxes (NOT private: an evaluation);
* distance: the RKHS distance of the box mixture (what ``sample`` draws from) to the data, with
  the kernel exp(-gamma ||x - y||^2), gamma = 1 / (d s^2), s the data's standard deviation per
  column (uniform: 1 / sqrt(12)); an empty release is the zero embedding.

Both are evaluated on the first EVAL_ROWS rows of the data (the synthesis sees all of them), to
keep the box-kernel terms affordable for releases of thousands of cells.

``--label`` names the library version the rows come from (run the script once with each
``PYTHONPATH``, in one session): rows of other labels are kept, so one table holds both.
Results: benchmarks/results/synth_fill.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax.budget import Budget
from dpm_jax.eval.mmd import kernel_mean, rkhs_distance_boxes
from dpm_jax.synth.api import synthesize

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
METHODS = ("grid", "kdtree", "privtree", "refine")
N = 100_000
EVAL_ROWS = 20_000


def data_sets(seed: int = 0):
    """(name, X, bounds, s): data that fill their public box."""
    rng = np.random.default_rng(seed)
    for d in (2, 5, 10):
        yield f"uniform d={d}", rng.uniform(size=(N, d)).astype(np.float32), (0.0, 1.0), 1.0 / math.sqrt(12.0)
        yield f"normal d={d}", rng.normal(size=(N, d)).astype(np.float32), (-5.0, 5.0), 1.0


@jax.jit
def _inside_any(points, lower, upper):
    return jnp.any(jnp.all((points[:, None, :] >= lower) & (points[:, None, :] <= upper), axis=2), axis=1)


def _covered(points, lower, upper, chunk: int = 1024) -> float:
    """The share of ``points`` inside at least one box."""
    if len(lower) == 0:
        return 0.0
    inside = [np.asarray(_inside_any(points[i : i + chunk], lower, upper)) for i in range(0, len(points), chunk)]
    return float(np.concatenate(inside).mean())


def evaluate(X, bounds, s, epsilon, method, num_keys):
    d = X.shape[1]
    gamma = 1.0 / (d * s * s)
    sample = X[:EVAL_ROWS]
    kxx = kernel_mean(sample, gamma)
    keys = jax.random.split(jax.random.key(0), num_keys)
    cells, covered, distance = [], [], []
    for key in keys:
        out = synthesize(key, X, Budget(epsilon, 1e-6), bounds, method=method)
        valid = np.asarray(out.valid) & (np.asarray(out.weights) > 0)
        lower, upper, weights = (np.asarray(a)[valid] for a in (out.lower, out.upper, out.weights))
        cells.append(int(valid.sum()))
        covered.append(_covered(sample, lower, upper))
        empty = not valid.any()
        distance.append(math.sqrt(kxx) if empty else rkhs_distance_boxes(sample, lower, upper, weights, gamma, kxx))
    return dict(
        method=method,
        epsilon=epsilon,
        median_cells=float(np.median(cells)),
        median_covered=float(np.median(covered)),
        median_distance=float(np.median(distance)),
    )


def table(rows: list[dict]) -> str:
    labels = sorted({r["label"] for r in rows})
    lines = [
        "# Synthetic data from data that fill their bounds (benchmarks/synth_fill.py)",
        "",
        f"n = {N:,} (evaluated on the first {EVAL_ROWS:,}), default SynthConfig, add/remove-one (epsilon, 1e-6);"
        " medians over keys. covered: the share of the data inside the released boxes (NOT private);"
        " distance: RKHS distance of the box mixture.",
        "",
        "| data | epsilon | method | " + " | ".join(f"{lab}: cells / covered / distance" for lab in labels) + " |",
        "|---|---|---|" + "---|" * len(labels),
    ]
    index = {(r["data"], r["epsilon"], r["method"], r["label"]): r for r in rows}
    for data, epsilon, method in sorted({(r["data"], r["epsilon"], r["method"]) for r in rows}):
        cells = []
        for lab in labels:
            r = index.get((data, epsilon, method, lab))
            cells.append(
                "-"
                if r is None
                else f"{r['median_cells']:.0f} / {r['median_covered']:.2f} / {r['median_distance']:.3g}"
            )
        lines.append(f"| {data} | {epsilon} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the library version the rows come from")
    parser.add_argument("--keys", type=int, default=3)
    parser.add_argument("--epsilons", default="0.1,1")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    out_path = RESULTS / "synth_fill.json"
    rows = json.loads(out_path.read_text()) if out_path.exists() else []
    rows = [r for r in rows if r["label"] != args.label]
    for name, X, bounds, s in data_sets():
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            for method in args.methods.split(","):
                row = dict(data=name, label=args.label, **evaluate(X, bounds, s, epsilon, method, args.keys))
                print(json.dumps(row), flush=True)
                rows.append(row)
                out_path.write_text(json.dumps(rows, indent=1))
                (RESULTS / "synth_fill.md").write_text(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
