"""The ``dpm-jax`` command line: formats, the JSON release, atomic outputs, one-line errors.

Commands run in-process through ``main(argv)``; one subprocess checks ``python -m dpm_jax``.
All clustering runs share one shape (256 x 3), tau_r and budget, hence one compiled
program (the same as tests/test_sklearn.py uses); epsilon = 1000 keeps the noise
negligible so that the assertions on the content of a release are about the plumbing.
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
import types

import jax
import numpy as np
import pytest

import dpm_jax
from dpm_jax.cli import main, read_points
from dpm_jax.cli.main import CONFIG_OPTIONS, build_parser, config_from_args
from dpm_jax.eval.datasets import synthetic_blobs

EPSILON, DELTA, TAU_R = 10.0, 1e-6, 2
BOUNDS = (-10.0, 10.0)
DATA = synthetic_blobs(256, 3, num_blobs=3, box=(-8.0, 8.0), std=0.5, seed=3)
ARGS = [
    "--epsilon",
    str(EPSILON),
    "--delta",
    str(DELTA),
    "--bounds",
    *map(str, BOUNDS),
    "--tau-r",
    str(TAU_R),
    "--seed",
    "7",
]


def write_csv(path, values, header=None):
    with open(path, "w") as file:
        if header is not None:
            file.write(",".join(header) + "\n")
        for row in values:
            file.write(",".join(repr(float(v)) for v in row) + "\n")
    return str(path)


def run(capsys, argv):
    """(exit status, stdout, stderr lines) of ``dpm-jax argv``."""
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err.splitlines()


@pytest.mark.slow
def test_cluster_writes_a_consistent_release(tmp_path, capsys):
    # Long because: compiles the CLI's clustering (10 s in the fast loop, 2 cores at load 9).
    source = write_csv(tmp_path / "data.csv", DATA.points, header=["a", "b", "c"])
    out, centers_csv = tmp_path / "release.json", tmp_path / "centers.csv"
    status, stdout, stderr = run(capsys, ["cluster", source, *ARGS, "--out", out, "--centers-csv", centers_csv])
    assert status == 0 and stdout == ""
    assert "k=" in stderr[-1] and "Traceback" not in "\n".join(stderr)

    release = json.loads(out.read_text())
    k = release["k"]
    assert release["columns"] == ["a", "b", "c"]
    assert len(release["centers"]) == len(release["counts"]) == len(release["leaf_nodes"]) == k >= 1
    # The ledger adds up to the requested budget.
    assert math.fsum(e["epsilon"] for e in release["ledger"]) == pytest.approx(EPSILON, rel=1e-12)
    assert math.fsum(e["delta"] for e in release["ledger"]) == pytest.approx(DELTA, rel=1e-12)
    assert release["budget"] == {"epsilon": EPSILON, "delta": DELTA}
    assert release["config"]["tau_r"] == TAU_R
    # The tree: its leaves are exactly the clusters, with the clusters' noisy counts.
    nodes = {node["node"]: node for node in release["split_tree"]}
    leaves = sorted(i for i, node in nodes.items() if not node["is_split"])
    assert leaves == sorted(release["leaf_nodes"])
    for node_id, count in zip(release["leaf_nodes"], release["counts"]):
        assert nodes[node_id]["noisy_count"] == pytest.approx(count)
    for i, node in nodes.items():
        assert (node["split_dim"] is None) == (not node["is_split"])
        if node["is_split"]:
            assert {2 * i, 2 * i + 1} <= set(nodes)
            assert BOUNDS[0] <= node["split_position"] <= BOUNDS[1]
    assert np.all((np.array(release["centers"]) >= BOUNDS[0]) & (np.array(release["centers"]) <= BOUNDS[1]))
    # Nothing per point is released.
    assert "labels_nonprivate" not in release and "labels" not in release

    # The centres CSV carries the input's column names and the same numbers.
    lines = centers_csv.read_text().splitlines()
    assert lines[0] == "a,b,c" and len(lines) == k + 1
    np.testing.assert_array_equal(np.loadtxt(lines[1:], delimiter=","), np.array(release["centers"]))

    # The seed reproduces the functional API.
    result = dpm_jax.cluster(
        jax.random.key(7), DATA.points, dpm_jax.Budget(EPSILON, DELTA), BOUNDS, config=dpm_jax.DPMConfig(tau_r=TAU_R)
    )
    np.testing.assert_allclose(release["centers"], np.asarray(result.centers)[np.asarray(result.valid)], rtol=1e-6)


@pytest.mark.slow
def test_formats_agree(tmp_path, capsys):
    # Long because: compiles a clustering per input format (6 s in the fast loop, 2 cores at load 8).
    np.save(tmp_path / "data.npy", DATA.points)
    sources = [
        tmp_path / "data.npy",
        write_csv(tmp_path / "plain.csv", DATA.points),
        write_csv(tmp_path / "named.csv", DATA.points, header=["a", "b", "c"]),
    ]
    releases = []
    for source in sources:
        status, stdout, _ = run(capsys, ["cluster", source, *ARGS])
        assert status == 0
        releases.append(json.loads(stdout))  # without --out the release goes to stdout
    assert releases[0]["columns"] == releases[1]["columns"] == ["x0", "x1", "x2"]
    assert releases[2]["columns"] == ["a", "b", "c"]
    assert releases[0]["centers"] == releases[1]["centers"] == releases[2]["centers"]


def test_parquet(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    path = tmp_path / "data.parquet"
    parquet.write_table(
        pyarrow.table(
            {
                "a": DATA.points[:, 0],
                "b": DATA.points[:, 1].astype(np.float64),
                "c": np.round(DATA.points[:, 2]).astype(np.int64),
            }
        ),
        path,
    )
    points = read_points(str(path))
    assert points.columns == ("a", "b", "c")
    np.testing.assert_allclose(points.values[:, :2], DATA.points[:, :2])
    np.testing.assert_array_equal(points.values[:, 2], np.round(DATA.points[:, 2]))

    parquet.write_table(pyarrow.table({"a": [1.0, 2.0], "name": ["x", "y"]}), path)
    with pytest.raises(ValueError, match="column 'name'.*numeric"):
        read_points(str(path))


@pytest.mark.slow
def test_stream_reads_parquet_row_groups_and_npy_and_gives_the_in_memory_release(tmp_path, capsys):
    # Long because: compiles cluster_stream's passes and the in-memory run (23 s, 2 cores at load 10).
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    table = pyarrow.table({"a": DATA.points[:, 0], "b": DATA.points[:, 1], "c": DATA.points[:, 2]})
    parquet_path = tmp_path / "data.parquet"
    parquet.write_table(table, parquet_path, row_group_size=100)  # 3 row groups
    assert parquet.ParquetFile(parquet_path).num_row_groups == 3
    npy_path = tmp_path / "data.npy"
    np.save(npy_path, DATA.points)
    releases = []
    for argv in (
        ["cluster", parquet_path, *ARGS],
        ["cluster", parquet_path, *ARGS, "--stream", "--chunk-rows", "64"],
        ["cluster", npy_path, *ARGS, "--stream"],
    ):
        status, stdout, stderr = run(capsys, argv)
        assert status == 0, stderr
        releases.append(json.loads(stdout))
    assert releases[1]["columns"] == ["a", "b", "c"] and releases[2]["columns"] == ["x0", "x1", "x2"]
    for streamed in releases[1:]:
        streamed["columns"] = releases[0]["columns"]
        assert streamed == releases[0]


def test_stream_names_the_row_group_with_a_missing_value(tmp_path, capsys):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    values = [float(v) for v in DATA.points[:, 0]]
    values[250] = None  # in the third row group of 100 rows
    path = tmp_path / "data.parquet"
    parquet.write_table(pyarrow.table({"a": values, "b": DATA.points[:, 1]}), path, row_group_size=100)
    status, _, stderr = run(capsys, ["cluster", path, *ARGS, "--stream"])
    assert status == 1 and "chunk 2 contains NaN or inf (first at row 50 of the chunk, column 0)" in stderr[-1]
    status, _, stderr = run(capsys, ["cluster", write_csv(tmp_path / "d.csv", DATA.points), *ARGS, "--stream"])
    assert status == 1 and "--stream reads .npy and .parquet" in stderr[-1]


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "data.parquet"
    path.write_bytes(b"PAR1")
    status, _, stderr = run(capsys, ["cluster", path, *ARGS])
    assert status == 1 and stderr == [stderr[0]] and "pip install pyarrow" in stderr[0]


def make_input_files(folder):
    """The input files of the bad-input cases, by name."""
    files = {
        "good": write_csv(folder / "good.csv", DATA.points[:10]),
        "missing": folder / "nope.csv",
        "text": folder / "text.csv",
        "nan": folder / "nan.csv",
        "empty": folder / "empty.csv",
        "flat": folder / "flat.npy",
        "txt": folder / "data.txt",
    }
    files["text"].write_text("a,b\n1.0,2.0\n3.0,hello\n")
    files["nan"].write_text("1.0,2.0\nnan,4.0\n")
    files["empty"].write_text("")
    np.save(files["flat"], np.arange(5.0))
    return files


BUDGET = ["--epsilon", "1", "--delta", "1e-6"]
GOOD_BOUNDS = ["--bounds", "-10", "10"]
BAD_INPUTS = {  # name: (input file, options, a fragment of the expected message)
    "missing file": ("missing", [*BUDGET, *GOOD_BOUNDS], "not found"),
    "non-numeric column": ("text", [*BUDGET, *GOOD_BOUNDS], "hello"),
    "NaN": ("nan", [*BUDGET, *GOOD_BOUNDS], "is nan"),
    "bounds missing": ("good", BUDGET, "--bounds"),
    "bounds reversed": ("good", [*BUDGET, "--bounds", "1", "0"], "LO < HI"),
    "epsilon zero": ("good", ["--epsilon", "0", "--delta", "1e-6", *GOOD_BOUNDS], "epsilon"),
    "epsilon negative": ("good", ["--epsilon", "-1", "--delta", "1e-6", *GOOD_BOUNDS], "epsilon"),
    "epsilon not a number": ("good", ["--epsilon", "one", "--delta", "1e-6", *GOOD_BOUNDS], "--epsilon"),
    "unknown format": ("txt", [*BUDGET, *GOOD_BOUNDS], ".npy, .csv or .parquet"),
    "empty csv": ("empty", [*BUDGET, *GOOD_BOUNDS], "empty"),
    "1-D npy": ("flat", [*BUDGET, *GOOD_BOUNDS], "1-D"),
    "bad tau_r": ("good", [*BUDGET, *GOOD_BOUNDS, "--tau-r", "0"], "tau_r"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_fails_with_one_line_and_no_output(tmp_path, capsys, name):
    source, options, fragment = BAD_INPUTS[name]
    source = make_input_files(tmp_path)[source]
    out = tmp_path / "out" / "release.json"
    out.parent.mkdir()
    before = sorted(os.listdir(tmp_path))
    status, stdout, stderr = run(
        capsys, ["cluster", source, *options, "--out", out, "--centers-csv", out.with_suffix(".csv")]
    )
    assert status != 0
    assert len(stderr) == 1 and stderr[0].startswith("dpm-jax: error: "), stderr
    assert fragment in stderr[0], stderr
    assert stdout == ""
    assert os.listdir(out.parent) == [] and sorted(os.listdir(tmp_path)) == before  # no partial or temp files


def test_usage_errors_are_one_line(capsys):
    for argv in ([], ["cluster"], ["frobnicate"], ["demo", "--n", "many"]):
        status, _, stderr = run(capsys, argv)
        assert status == 2 and len(stderr) == 1 and stderr[0].startswith("dpm-jax: error: "), stderr


def test_missing_output_folder_fails_before_clustering(tmp_path, capsys):
    source = write_csv(tmp_path / "data.csv", DATA.points)
    status, _, stderr = run(capsys, ["cluster", source, *ARGS, "--out", tmp_path / "no" / "r.json"])
    assert status == 1 and len(stderr) == 1 and "does not exist" in stderr[0]


@pytest.mark.slow
def test_demo_prints_k_accuracy_and_ledger(capsys):
    # Long because: compiles the demo's clustering (6 s in the fast loop, 2 cores at load 7).
    status, stdout, stderr = run(
        capsys,
        [
            "demo",
            "--n",
            256,
            "--d",
            3,
            "--blobs",
            3,
            "--seed",
            3,
            "--epsilon",
            EPSILON,
            "--delta",
            DELTA,
            "--tau-r",
            TAU_R,
        ],
    )
    assert status == 0
    assert "clusters found: k=" in stdout and "accuracy" in stdout
    accuracy = float(stdout.split("accuracy (majority label of the nearest DP centre): ")[1].split()[0])
    assert 0.0 < accuracy <= 1.0
    total = [line for line in stdout.splitlines() if line.startswith("total")]
    assert len(total) == 1 and float(total[0].split()[1]) == pytest.approx(EPSILON)
    assert all(line.startswith("dpm-jax: ") for line in stderr)  # status goes to stderr


def test_bench_passes_its_arguments_to_the_benchmark(capsys, monkeypatch):
    calls = []
    fake = types.ModuleType("dpm_jax.eval.benchmark")
    fake.main = lambda argv: calls.append(argv) or 3
    monkeypatch.setitem(sys.modules, "dpm_jax.eval.benchmark", fake)
    assert main(["bench", "--n", "10", "--help"]) == 3
    assert calls == [["--n", "10", "--help"]]

    monkeypatch.setitem(sys.modules, "dpm_jax.eval.benchmark", None)  # not installed
    status, _, stderr = run(capsys, ["bench"])
    assert status == 1 and len(stderr) == 1 and "benchmark is not available" in stderr[0]


def test_config_options_are_dpm_config_fields():
    fields = dataclasses.fields(dpm_jax.DPMConfig)
    assert [name for name, _, _ in CONFIG_OPTIONS] == [field.name for field in fields]  # every field, none twice
    assert [text for _, _, text in CONFIG_OPTIONS] == [field.metadata["help"] for field in fields]
    shares = build_parser().parse_args(["demo", "--epsilon-shares", "0.1,0.2,0.3,0.4", "--delta-shares", "0.5,0.5"])
    assert config_from_args(shares) == dpm_jax.DPMConfig(epsilon_shares=(0.1, 0.2, 0.3, 0.4), delta_shares=(0.5, 0.5))
    args = build_parser().parse_args(["demo", "--tau-r", "3", "--alpha", "2.5"])
    assert config_from_args(args) == dpm_jax.DPMConfig(tau_r=3, alpha=2.5)
    assert config_from_args(build_parser().parse_args(["demo", "--tau-r", "auto"])) == dpm_jax.DPMConfig(tau_r="auto")
    assert config_from_args(build_parser().parse_args(["demo", "--split-grid", "paper"])) == dpm_jax.DPMConfig(
        split_grid="paper"
    )
    assert config_from_args(build_parser().parse_args(["demo", "--lattice-step", "1"])).lattice_step == 1.0
    assert config_from_args(build_parser().parse_args(["demo", "--split-window", "1"])).split_window == 1


@pytest.mark.slow
def test_cluster_with_an_automatic_depth_lists_the_depth_count_first(tmp_path, capsys):
    # Long because: compiles the automatic-depth clustering (12 s, 2 cores at load 10).
    source = write_csv(tmp_path / "data.csv", DATA.points, header=["a", "b", "c"])
    out = tmp_path / "release.json"
    args = [a if a != str(TAU_R) else "auto" for a in ARGS]
    status, _, stderr = run(capsys, ["cluster", source, *args, "--out", out])
    assert status == 0, stderr
    release = json.loads(out.read_text())
    assert release["ledger"][0]["name"] == "depth" and release["config"]["tau_r"] == "auto"
    assert f"chose tau_r={release['depth']} of" in release["ledger"][0]["sensitivity_rule"]
    assert len([e for e in release["ledger"] if e["name"].startswith("split/")]) == release["depth"]
    assert math.fsum(e["epsilon"] for e in release["ledger"]) == pytest.approx(EPSILON, rel=1e-12)


def test_python_dash_m_runs_the_cli(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpm_jax",
            "cluster",
            str(tmp_path / "missing.npy"),
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            "--bounds",
            "0",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 1
    assert completed.stderr.strip().count("\n") == 0 and "not found" in completed.stderr


def test_plan_prints_the_report_from_public_numbers(capsys):
    status, stdout, stderr = run(
        capsys, ["plan", "--n", 20_000, "--d", 10, "--epsilon", 1, "--delta", 1e-6, "--tau-r", 5]
    )
    assert status == 0 and stderr == []
    assert (
        stdout
        == str(dpm_jax.diagnostics.plan(20_000, 10, dpm_jax.Budget(1.0, 1e-6), dpm_jax.DPMConfig(tau_r=5))) + "\n"
    )
    status, stdout, stderr = run(capsys, ["plan", "--n", 0, "--d", 10, "--epsilon", 1, "--delta", 1e-6])
    assert status == 1 and stdout == "" and len(stderr) == 1 and "n must be a positive" in stderr[0]


@pytest.mark.slow
def test_cluster_warns_in_one_line_when_the_budget_is_starved(tmp_path, capsys):
    # Long because: a starved budget compiles the clustering again (9 s, 2 cores at load 10).
    source = write_csv(tmp_path / "data.csv", DATA.points)
    starved = ["--epsilon", "1", *ARGS[2:]]  # n~ * epsilon ~ 256: two clusters need ~870 here
    status, _, stderr = run(capsys, ["cluster", source, *starved, "--out", tmp_path / "release.json"])
    assert status == 0
    warning = [line for line in stderr if line.startswith("dpm-jax: warning: ")]
    assert len(warning) == 1 and "cannot separate even two clusters" in warning[0]


def write_pandas_style_csv(path, values, label):
    """What pandas' DataFrame.to_csv writes by default: an unnamed index column first, then the data and a label."""
    with open(path, "w") as file:
        file.write(",a,b,c,label\n")
        for i, (row, y) in enumerate(zip(values, label)):
            file.write(f"{i}," + ",".join(repr(float(v)) for v in row) + f",{y}\n")
    return str(path)


@pytest.mark.slow
def test_index_and_label_columns_are_refused_or_dropped_by_name_or_position(tmp_path, capsys):
    # Long because: compiles a clustering for its columns (9 s in the fast loop, 2 cores at load 5).
    plain = json.loads(run(capsys, ["cluster", write_csv(tmp_path / "p.csv", DATA.points, ["a", "b", "c"]), *ARGS])[1])
    source = write_pandas_style_csv(tmp_path / "pandas.csv", DATA.points, DATA.labels)
    status, stdout, stderr = run(capsys, ["cluster", source, *ARGS])
    assert status == 1 and stdout == "" and "looks like a row index" in stderr[-1] and "--drop 0" in stderr[-1]
    for selection in (["--drop", "0,label"], ["--columns", "a,b,c"], ["--columns", "1,2,3"]):
        status, stdout, stderr = run(capsys, ["cluster", source, *ARGS, *selection])
        assert status == 0, stderr
        assert json.loads(stdout) == plain
    status, _, stderr = run(capsys, ["cluster", source, *ARGS, "--columns", "a,zz"])
    assert status == 1 and "no column 'zz'" in stderr[-1]
    # an unnamed counter column in a header-less file is refused by its values
    counter = np.column_stack([np.arange(len(DATA.points)), DATA.points])
    status, _, stderr = run(capsys, ["cluster", write_csv(tmp_path / "counter.csv", counter), *ARGS])
    assert status == 1 and "its values are 0, 1, 2" in stderr[-1]


def test_per_feature_bounds_repeated_or_from_a_file_match_the_python_api(tmp_path, capsys):
    source = write_csv(tmp_path / "data.csv", DATA.points)
    lower, upper = [-10.0, -12.0, -9.0], [10.0, 11.0, 9.5]
    options = ["--epsilon", EPSILON, "--delta", DELTA, "--tau-r", TAU_R, "--seed", 7]
    repeated = [x for pair in zip(lower, upper) for x in ("--bounds", pair[0], pair[1])]
    status, stdout, stderr = run(capsys, ["cluster", source, *options, *repeated])
    assert status == 0, stderr
    bounds_file = tmp_path / "bounds.csv"
    bounds_file.write_text("# lo,hi per column\n" + "".join(f"{lo},{hi}\n" for lo, hi in zip(lower, upper)))
    status, from_file, stderr = run(capsys, ["cluster", source, *options, "--bounds-file", bounds_file])
    assert status == 0, stderr
    assert json.loads(stdout) == json.loads(from_file)
    release = json.loads(stdout)
    assert release["bounds"] == {"lower": lower, "upper": upper}
    result = dpm_jax.cluster(
        jax.random.key(7),
        DATA.points,
        dpm_jax.Budget(EPSILON, DELTA),
        (lower, upper),
        config=dpm_jax.DPMConfig(tau_r=TAU_R),
    )
    np.testing.assert_allclose(release["centers"], np.asarray(result.centers)[np.asarray(result.valid)], rtol=1e-6)
    status, _, stderr = run(capsys, ["cluster", source, *options, "--bounds", 0, 1, "--bounds", 0, 1])
    assert status == 1 and "2 bounds pairs for 3 columns" in stderr[-1]


def test_help_texts_say_what_is_required_and_what_acts(capsys):
    parser = build_parser()
    cluster_parser = parser._subparsers._group_actions[0].choices["cluster"]
    usage = cluster_parser.format_usage()
    assert "(--bounds BOUND [BOUND ...] | --bounds-file FILE)" in usage and "[--bounds " not in usage
    text = cluster_parser.format_help()
    assert "(default 6) (default 6)" not in " ".join(text.split()) and "paper defaults" not in text
    assert "used only with --split-grid paper" in text


def test_a_missing_csv_value_is_named_by_line_and_column(tmp_path, capsys):
    path = tmp_path / "gap.csv"
    path.write_text("a,b\n1.0,2.0\n3.0,\n")
    status, _, stderr = run(capsys, ["cluster", path, *ARGS])
    assert status == 1 and "line 3, column 'b' (position 1) is empty (a missing value)" in stderr[-1]
    assert "could not convert" not in stderr[-1]


@pytest.mark.slow
def test_the_budget_warning_points_cli_users_at_dpm_jax_plan(tmp_path, capsys):
    # Long because: a starved budget compiles the clustering (8 s in the fast loop, 2 cores at load 9).
    source = write_csv(tmp_path / "data.csv", DATA.points)
    status, _, stderr = run(capsys, ["cluster", source, "--epsilon", "1", *ARGS[2:], "--out", tmp_path / "r.json"])
    warning = next(line for line in stderr if "cannot separate" in line)
    assert status == 0 and "run dpm-jax plan --n " in warning and "print(" not in warning


def test_the_accountant_file_is_charged_and_refuses_before_reading(tmp_path, capsys):
    source = write_csv(tmp_path / "data.csv", DATA.points)
    state = tmp_path / "budget.json"
    status, stdout, _ = run(capsys, ["accountant", state, "--epsilon", 2 * EPSILON + 1, "--delta", 1e-5])
    assert status == 0 and "0 releases" in stdout
    for _ in range(2):
        status, _, stderr = run(capsys, ["cluster", source, *ARGS, "--accountant", state])
        assert status == 0, stderr
    assert [c["what"] for c in json.loads(state.read_text())["charges"]] == ["cluster", "cluster"]
    os.remove(source)  # a refused run must not even open its input
    status, _, stderr = run(capsys, ["cluster", source, *ARGS, "--accountant", state])
    assert status == 1 and "Nothing was read" in stderr[-1]
    status, stdout, _ = run(capsys, ["accountant", state])
    assert status == 0 and "2 releases spent epsilon = 20" in stdout
    status, _, stderr = run(capsys, ["accountant", state, "--epsilon", 1, "--delta", 1e-6])
    assert status == 1 and "never overwritten" in stderr[-1]


@pytest.mark.slow
def test_cluster_stream_reads_a_parquet_path_with_the_clis_reader(tmp_path, capsys):
    # Long because: compiles cluster_stream's passes (14 s in the fast loop, 2 cores at load 9).
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    path = tmp_path / "data.parquet"
    table = pyarrow.table({"a": DATA.points[:, 0], "b": DATA.points[:, 1], "c": DATA.points[:, 2]})
    parquet.write_table(table, path, row_group_size=100)
    budget, config = dpm_jax.Budget(EPSILON, DELTA), dpm_jax.DPMConfig(tau_r=TAU_R)
    streamed = dpm_jax.cluster_stream(jax.random.key(7), str(path), budget, BOUNDS, config=config, progress=True)
    in_memory = dpm_jax.cluster(jax.random.key(7), DATA.points, budget, BOUNDS, config=config)
    np.testing.assert_array_equal(np.asarray(streamed.centers), np.asarray(in_memory.centers))
    err = capsys.readouterr().err
    assert "dpm_jax: pass validation" in err and "\033[" not in err and "\r" not in err  # not a terminal


@pytest.mark.parametrize("command", [["kmeans", "--k", "3"], ["synthesize", "--rows", "5", "--out", "rows.csv"]])
@pytest.mark.parametrize(
    "bounds, message",
    [
        (["--bounds", "0", "1", "--bounds-share", "0.2"], "--bounds-share applies only to --bounds private"),
        (["--bounds", "private", "--bounds-share", "1.5"], "PrivateBounds.share must be in (0, 1)"),
        (["--bounds", "privat", "1"], "--bounds LO HI must be numbers"),
        (["--bounds", "1"], "--bounds takes LO HI or the word private"),
        ([], "--bounds LO HI is required"),
    ],
)
def test_kmeans_and_synthesize_refuse_bad_bounds_before_reading_the_data(tmp_path, capsys, command, bounds, message):
    """The shared options (dpm_jax.cli.run_options): a bad --bounds / --bounds-share is named
    before the (here missing) input is opened."""
    name, *options = command
    missing = str(tmp_path / "missing.npy")
    argv = [name, missing, "--epsilon", "1", "--delta", "1e-6", *options, *bounds]
    assert main([a if a != "rows.csv" else str(tmp_path / a) for a in argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "missing.npy" not in err
