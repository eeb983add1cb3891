"""Issue 27: the merge (dpm_jax.merge) as the engine runs it, against the same runs without it.

    nice python benchmarks/zoo.py --algorithms dpm-merge --keys 8 --out benchmarks/results/zoo_merge.json
    nice python benchmarks/merge_engine.py --zoo benchmarks/results/zoo_merge.json [--keys 8]

Two parts, both paired (the same keys, ``zoo.py``'s ``cell_keys``, seed 0):
  * the zoo: ``zoo.py``'s ``dpm-merge`` rows (``DPMConfig(merge_share=1/12)``, the default since
    stop 44) against the ``dpm`` rows of ``benchmarks/results/zoo.json``, recorded before the merge
    existed (``merge_share=0`` gives those releases bit for bit: checked on 6 cells, every key);
  * Synth Table 2 and UCI Letters at epsilon 1 (the DPM paper's Table 2 cells), run here with
    and without the merge.
Medians of ARI, accuracy and k per cell. Results: benchmarks/results/merge_engine.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics

import numpy as np

import dpm_jax
from dpm_jax.eval.datasets import load_dataset
from dpm_jax.eval.zoo import labelled_scores, paper_delta
from zoo import cell_keys

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
TABLE2 = ("synth-10d", "synth-100d", "letters")
CONFIGS = {"dpm": dpm_jax.DPMConfig(merge_share=0.0), "dpm-merge": dpm_jax.DPMConfig(merge_share=1 / 12)}


def table2_rows(keys: int) -> list[dict]:
    rows = []
    for name in TABLE2:
        data = load_dataset(name)
        n, classes = len(data.points), int(np.max(data.labels)) + 1
        budget = dpm_jax.Budget(1.0, paper_delta(n))
        for algorithm, config in CONFIGS.items():
            runs = []
            for key in cell_keys(0, name, n, 1.0, keys):
                result = dpm_jax.cluster(key, data.points, budget, data.bounds, config=config)
                centers, valid = np.asarray(result.centers), np.asarray(result.valid)
                runs.append(labelled_scores(data.points, data.labels, centers, valid, classes) | {"k": int(result.k)})
            row = dict(dataset=name, n=n, epsilon=1.0, algorithm=algorithm)
            for score in ("ari", "accuracy", "k"):
                row[score] = [r[score] for r in runs]
                row[f"median_{score}"] = statistics.median(row[score])
            print(json.dumps({k: v for k, v in row.items() if not isinstance(v, list)}), flush=True)
            rows.append(row)
    return rows


def zoo_rows(merged_path: pathlib.Path) -> list[dict]:
    """Pairs (default, merged) of the zoo's cells, from zoo.py's JSON files."""
    cell = lambda r: (r["dataset"], r["n"], r["epsilon"])
    default = {cell(r): r for r in json.loads((RESULTS / "zoo.json").read_text())["rows"] if r["algorithm"] == "dpm"}
    rows = []
    for merged in json.loads(merged_path.read_text())["rows"]:
        if merged["algorithm"] == "dpm-merge" and cell(merged) in default:
            rows += [default[cell(merged)], merged]
    return rows


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
        a, b = pair["dpm"], pair["dpm-merge"]
        change = b["median_ari"] - a["median_ari"]
        lines.append(f"| {name} | {n:,} | {epsilon:g} | {show(a)} | {show(b)} | {change:+.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", type=pathlib.Path, default=RESULTS / "zoo_merge.json", help="zoo.py's dpm-merge rows")
    parser.add_argument("--keys", type=int, default=8)
    args = parser.parse_args(argv)
    rows = zoo_rows(args.zoo) + table2_rows(args.keys)
    (RESULTS / "merge_engine.json").write_text(json.dumps(rows, indent=1))
    (RESULTS / "merge_engine.md").write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
