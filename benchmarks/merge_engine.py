"""Issue 27: the merge (dpm_jax.merge) as the engine runs it, against the same runs without it.

    nice python benchmarks/zoo.py --algorithms dpm,dpm-no-merge --keys 8
    cd benchmarks && nice python merge_engine.py [--keys 8]

Two parts, both paired (the same keys, ``zoo.py``'s ``cell_keys``, seed 0):
  * the zoo: ``benchmarks/results/zoo.json``'s ``dpm`` rows (the default, with the merge since stop
    44: ``merge_share=1/12``) against its ``dpm-no-merge`` rows (``merge_share=0``, whose releases
    are the engine's before the merge, bit for bit);
  * ``CELLS`` at epsilon 1, run here with and without the merge: Synth Table 2 and UCI Letters (the
    DPM paper's Table 2 cells), the notebook's 16 blobs, 64 blobs in 10-D at n = 20,000, and the
    zoo at n = 20,000 under the default private bounds (issue 24's cells).
Medians of ARI, accuracy and k per cell. Results: benchmarks/results/merge_engine.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics

import numpy as np

import dpm_jax
from dpm_jax.eval import datasets
from dpm_jax.eval.datasets import load_dataset
from dpm_jax.eval.zoo import labelled_scores, paper_delta
from zoo import cell_keys

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
CONFIGS = {"dpm-no-merge": dpm_jax.DPMConfig(merge_share=0.0), "dpm": dpm_jax.DPMConfig()}
WITHOUT, WITH = CONFIGS
# name: (loader, private bounds?): the paper's Table 2 cells, the notebook's data, the 64 blobs of
# issue 27's target, and issue 24's cells (the zoo at n = 20,000 under the default private bounds).
CELLS = {
    "synth-10d": (lambda: load_dataset("synth-10d"), False),
    "synth-100d": (lambda: load_dataset("synth-100d"), False),
    "letters": (lambda: load_dataset("letters"), False),
    "notebook": (lambda: datasets.synthetic_blobs(20_000, 2, num_blobs=16, seed=0), False),
    "blobs64-10d-20k": (lambda: datasets.synthetic_blobs(20_000, 10, seed=42), False),
    **{f"{name}/private-bounds": (lambda name=name: load_dataset(name, n=20_000), True) for name in datasets.ZOO},
}


def cell_rows(keys: int, names) -> list[dict]:
    rows = []
    for name in names:
        loader, private = CELLS[name]
        data = loader()
        n, classes = len(data.points), int(np.max(data.labels)) + 1
        budget, bounds = dpm_jax.Budget(1.0, paper_delta(n)), "private" if private else data.bounds
        for algorithm, config in CONFIGS.items():
            runs = []
            for key in cell_keys(0, name, n, 1.0, keys):
                result = dpm_jax.cluster(key, data.points, budget, bounds, config=config)
                centers, valid = np.asarray(result.centers), np.asarray(result.valid)
                runs.append(labelled_scores(data.points, data.labels, centers, valid, classes) | {"k": int(result.k)})
            row = dict(dataset=name, n=n, epsilon=1.0, algorithm=algorithm)
            for score in ("ari", "accuracy", "k"):
                row[score] = [r[score] for r in runs]
                row[f"median_{score}"] = statistics.median(row[score])
            print(json.dumps({k: v for k, v in row.items() if not isinstance(v, list)}), flush=True)
            rows.append(row)
    return rows


def zoo_rows(zoo_path: pathlib.Path) -> list[dict]:
    """The zoo's cells run both without and with the merge, from zoo.py's JSON file."""
    cell = lambda r: (r["dataset"], r["n"], r["epsilon"])
    rows = [r for r in json.loads(zoo_path.read_text())["rows"] if r["algorithm"] in CONFIGS]
    cells_of = lambda algorithm: {cell(r) for r in rows if r["algorithm"] == algorithm}
    both = cells_of(WITHOUT) & cells_of(WITH)
    return [r for r in rows if cell(r) in both]


def markdown(rows: list[dict]) -> str:
    cell = lambda r: (r["dataset"], r["n"], r["epsilon"])
    by_cell: dict = {}
    for r in rows:
        by_cell.setdefault(cell(r), {})[r["algorithm"]] = r
    lines = [
        "# The merge on the engine (benchmarks/merge_engine.py): medians over the same keys",
        "",
        "| data | n | epsilon | without merge: ARI / accuracy / k | with merge | ARI change |",
        "|---|---|---|---|---|---|",
    ]
    show = lambda r: f"{r['median_ari']:.3f} / {r['median_accuracy']:.3f} / {r['median_k']:g}"
    for (name, n, epsilon), pair in sorted(by_cell.items()):
        a, b = pair[WITHOUT], pair[WITH]
        change = b["median_ari"] - a["median_ari"]
        lines.append(f"| {name} | {n:,} | {epsilon:g} | {show(a)} | {show(b)} | {change:+.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", type=pathlib.Path, default=RESULTS / "zoo.json", help="zoo.py's results")
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--cells", default="", help="comma-separated names of CELLS (default: all)")
    args = parser.parse_args(argv)
    rows = zoo_rows(args.zoo) + cell_rows(args.keys, args.cells.split(",") if args.cells else CELLS)
    (RESULTS / "merge_engine.json").write_text(json.dumps(rows, indent=1))
    (RESULTS / "merge_engine.md").write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
