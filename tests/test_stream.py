"""cluster_stream (dpm_jax.stream): the in-memory release from chunks, and clear errors on bad chunks."""

import dataclasses

import numpy as np
import jax
import pytest

import dpm_jax
from conftest import SMALL_CONFIG
from dpm_jax.stream import ChunkError, cluster_stream
from dpm_jax.diagnostics.plan import InsufficientBudgetWarning

RELEASED = ("centers", "counts", "valid", "k", "split_interval_size", "leaf_node")


def assert_same_release(in_memory, streamed):
    for name in RELEASED:
        a, b = np.asarray(getattr(in_memory, name)), np.asarray(getattr(streamed, name))
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    for name, a, b in zip(in_memory.tree._fields, in_memory.tree, streamed.tree):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), f"tree.{name}"
    assert streamed.ledger == in_memory.ledger and streamed.labels_nonprivate is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 6])  # k = 6 and 4 with this data
def test_streamed_chunks_give_the_in_memory_release(small_blobs, budget, seed):
    # Long because: the streamed path compiles its per-chunk programs once per level count.
    points = small_blobs.points
    in_memory = dpm_jax.cluster(jax.random.key(seed), points, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG)
    chunks = [points[i : i + 170] for i in range(0, len(points), 170)]  # 4 chunks, pieces of at most 128 rows
    streamed = cluster_stream(
        jax.random.key(seed),
        chunks,
        budget,
        bounds=small_blobs.bounds,
        config=SMALL_CONFIG,
        chunk_rows=128,
        column_bytes=4 * len(points),
    )  # one sorted column per pass
    assert_same_release(in_memory, streamed)
    assert int(in_memory.k) >= 2  # a real tree, not a lone root


@pytest.mark.slow
def test_npy_path_memmap_and_factory_give_the_same_release(small_blobs, budget, tmp_path):
    # Long because: compiles the passes and streams three sources (45 s, 2 cores at load 9).
    path = tmp_path / "points.npy"
    np.save(path, small_blobs.points.astype(np.float64))  # not float32: converted per chunk
    in_memory = dpm_jax.cluster(
        jax.random.key(2), small_blobs.points.astype(np.float64), budget, bounds=small_blobs.bounds, config=SMALL_CONFIG
    )
    sources = {
        "path": str(path),
        "memmap": np.load(path, mmap_mode="r"),
        "factory": lambda: (np.load(path, mmap_mode="r")[i : i + 250] for i in range(0, 600, 250)),
    }
    for name, source in sources.items():
        # the same InsufficientBudgetWarning as cluster (600 points at epsilon = 1), from the released n~
        with pytest.warns(InsufficientBudgetWarning):
            streamed = cluster_stream(
                jax.random.key(2), source, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG, chunk_rows=256
            )
        assert_same_release(in_memory, streamed)


@pytest.fixture
def no_noise_drawn(monkeypatch):
    """Fails the test if the count noise (the run's first mechanism) is drawn."""

    def refuse(*args, **kwargs):
        raise AssertionError("noise was drawn before the bad chunk was reported")

    monkeypatch.setattr(dpm_jax.tree, "count_noise", refuse)


def _chunks_with(bad_index, bad_chunk, count=40, rows=10, d=3):
    rng = np.random.default_rng(0)
    chunks = [rng.uniform(-1, 1, (rows, d)).astype(np.float32) for _ in range(count)]
    chunks[bad_index] = bad_chunk
    return lambda: iter(chunks)


def test_nan_in_chunk_37_is_named_before_any_noise(no_noise_drawn, budget):
    bad = np.zeros((10, 3), np.float32)
    bad[4, 2] = np.nan
    with pytest.raises(ChunkError, match=r"chunk 37 contains NaN or inf \(first at row 4 of the chunk, column 2\)"):
        cluster_stream(jax.random.key(0), _chunks_with(37, bad), budget, bounds=(-1.0, 1.0), config=SMALL_CONFIG)


def test_column_mismatch_is_named_before_any_noise(no_noise_drawn, budget):
    with pytest.raises(ChunkError, match="chunk 5 has 4 columns, the first chunk has 3"):
        cluster_stream(
            jax.random.key(0),
            _chunks_with(5, np.zeros((10, 4), np.float32)),
            budget,
            bounds=(-1.0, 1.0),
            config=SMALL_CONFIG,
        )


@pytest.mark.parametrize(
    "source, message",
    [
        (lambda: iter([]), "yielded no chunks"),
        ([np.zeros((0, 3), np.float32)], "holds no rows"),
        (lambda: iter([np.zeros(3, np.float32)]), r"chunk 0 .* shape \(rows, d\)"),
    ],
)
def test_empty_or_shapeless_sources_are_refused(no_noise_drawn, budget, source, message):
    with pytest.raises(ChunkError, match=message):
        cluster_stream(jax.random.key(0), source, budget, bounds=(-1.0, 1.0), config=SMALL_CONFIG)


def test_a_one_shot_iterator_is_refused_with_the_fix(budget):
    with pytest.raises(TypeError, match="function that recreates it"):
        cluster_stream(jax.random.key(0), iter([np.zeros((5, 3))]), budget, bounds=(-1.0, 1.0), config=SMALL_CONFIG)


def test_a_file_that_disappears_mid_run_is_an_error_naming_the_chunk_and_pass(small_blobs, budget, tmp_path):
    paths = [tmp_path / f"part{i}.npy" for i in range(3)]
    for i, path in enumerate(paths):
        np.save(path, small_blobs.points[200 * i : 200 * (i + 1)])
    calls = []

    def chunks():
        calls.append(1)
        if len(calls) == 3:  # after the validation pass and the first Algorithm 2 pass
            paths[1].unlink()
        return (np.load(path, mmap_mode="r") for path in paths)

    with pytest.raises(ChunkError, match=r"reading chunk 1 of the chunk factory failed in pass .*FileNotFoundError"):
        cluster_stream(
            jax.random.key(0), chunks, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG, column_bytes=4 * 600
        )


def test_a_source_that_changes_between_passes_is_an_error(small_blobs, budget):
    calls = []

    def chunks():
        calls.append(1)
        rows = 600 if len(calls) == 1 else 590
        return iter([small_blobs.points[:rows]])

    with pytest.raises(ChunkError, match="changed between passes"):
        cluster_stream(jax.random.key(0), chunks, budget, bounds=small_blobs.bounds, config=SMALL_CONFIG)


@pytest.mark.slow
def test_auto_depth_streams_the_in_memory_release(small_blobs):
    # Long because: compiles the automatic-depth passes and the in-memory run (42 s, 2 cores at load 9).
    """tau_r="auto": the depth's noisy count reads the rows of the validation pass, so the depth,
    the ledger (its "depth" line first) and the whole release are cluster's with the same key."""
    config = dpm_jax.DPMConfig(tau_r="auto")
    budget = dpm_jax.Budget(10.0, 1e-6)  # n * epsilon = 6000: depth 5 here, 2 on 60 rows
    points = small_blobs.points
    for seed in (0, 5):
        key = jax.random.key(seed)
        in_memory = dpm_jax.cluster(key, points, budget, bounds=small_blobs.bounds, config=config)
        chunks = [points[i : i + 250] for i in range(0, len(points), 250)]
        streamed = cluster_stream(key, chunks, budget, bounds=small_blobs.bounds, config=config, chunk_rows=128)
        assert streamed.ledger[0].name == "depth"
        assert_same_release(in_memory, streamed)
    # The depth follows the number of rows streamed: a shallower tree on a tenth of them.
    few = cluster_stream(jax.random.key(0), points[:60], budget, bounds=small_blobs.bounds, config=config)
    assert int(few.depth) < int(in_memory.depth)


@pytest.mark.slow
def test_more_dimensions_than_algorithm_2_sorts_give_the_in_memory_release(budget):
    # Long because: compiles the passes for its own dimensions (49 s, 2 cores at load 9).
    """d = 20 > interval_max_dims = 16: the same random subset of dimensions is sorted, 3 columns per pass."""
    from dpm_jax.eval.datasets import synthetic_blobs

    data = synthetic_blobs(n=500, d=20, num_blobs=4, std=1.0, seed=8)
    config = dpm_jax.DPMConfig(tau_r=3, sigma_step=0.02, num_sigmas=10, split_grid="paper")
    assert config.interval_max_dims < 20
    in_memory = dpm_jax.cluster(jax.random.key(4), data.points, budget, bounds=data.bounds, config=config)
    streamed = cluster_stream(
        jax.random.key(4),
        [data.points[:123], data.points[123:]],
        budget,
        bounds=data.bounds,
        config=config,
        chunk_rows=100,
        column_bytes=3 * 4 * 500,
    )
    assert_same_release(in_memory, streamed)


def test_a_truncated_npy_file_is_named_before_any_noise(no_noise_drawn, budget, tmp_path):
    path = tmp_path / "points.npy"
    np.save(path, np.zeros((100, 3), np.float32))
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size - 40)  # the last 3 rows and a third are gone
    with pytest.raises(ChunkError, match=r"ends after 96 of its 100 rows: the file is truncated"):
        cluster_stream(jax.random.key(0), str(path), budget, bounds=(-1.0, 1.0), config=SMALL_CONFIG, chunk_rows=32)


# The default split grid (the cell grid) at a small depth, and on a public lattice: keys with k >= 4.
CELL_CONFIG = dpm_jax.DPMConfig(tau_r=4)
LATTICE_CONFIG = dpm_jax.DPMConfig(tau_r=4, lattice_step=0.5)


@pytest.mark.slow
@pytest.mark.parametrize("config, seed", [(CELL_CONFIG, 2), (CELL_CONFIG, 7), (LATTICE_CONFIG, 6)])
def test_the_default_cell_grid_gives_the_in_memory_release(small_blobs, budget, config, seed):
    # Long because: compiles the passes and the in-memory run, per case (20-34 s, 2 cores at load 9).
    """Every level bins each piece relative to its node's cell and routes it on the cells of the levels above."""
    points = small_blobs.points
    assert config.split_grid == dpm_jax.DPMConfig().split_grid == "cell"
    with pytest.warns(InsufficientBudgetWarning):  # as cluster warns: 600 points at epsilon = 1
        in_memory = dpm_jax.cluster(jax.random.key(seed), points, budget, bounds=small_blobs.bounds, config=config)
    assert int(in_memory.k) >= 4  # a tree several levels deep, so routing through the cells is exercised
    chunkings = {
        "one chunk": dict(data=points),
        "uneven": dict(data=[points[:170], points[170:201], points[201:]], chunk_rows=128),
    }
    for name, chunking in chunkings.items():
        with pytest.warns(InsufficientBudgetWarning):
            streamed = cluster_stream(
                jax.random.key(seed), config=config, budget=budget, bounds=small_blobs.bounds, **chunking
            )
        assert_same_release(in_memory, streamed)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dpm_jax.diagnostics.plan.InsufficientBudgetWarning")
def test_the_cell_grid_reads_the_data_tau_r_plus_3_times(small_blobs, budget):
    # Long because: compiles the passes for its own configuration (17 s, 2 cores at load 9).
    """No Algorithm 2 pass (the cell grid has no interval size): validation, root histogram, tau_r levels, leaves."""
    reads = {}

    def chunks(split_grid):
        reads[split_grid] = reads.get(split_grid, 0) + 1
        return iter([small_blobs.points[:300], small_blobs.points[300:]])

    for split_grid in ("cell", "paper"):
        config = dpm_jax.DPMConfig(tau_r=4, split_grid=split_grid)
        cluster_stream(
            jax.random.key(7),
            lambda: chunks(split_grid),
            budget,
            bounds=small_blobs.bounds,
            config=config,
            column_bytes=3 * 4 * 600,
        )  # the paper grid: one pass for all 3 columns
    assert reads == {"cell": 4 + 3, "paper": 4 + 4}


# The "no structure" test (dpm_jax.structure) at a budget where it runs on the first levels (epsilon
# theta >= its gate): tau_r = 4, half of the averaging's share of epsilon 8 on the tests.
STRUCTURE_CONFIG = dpm_jax.DPMConfig(tau_r=4, structure_share=0.5, merge_share=0.0)  # the test alone


@pytest.mark.slow
@pytest.mark.parametrize("seed", [4, 5])
def test_the_structure_test_streams_the_in_memory_release(seed):
    # Long because: compiles the passes and two in-memory runs (about 40 s, 2 cores at load 8).
    """3,000 uniform points filling the bounds (no structure): the streamed levels halt the nodes the
    in-memory tree halts (same key, same release: the root, whose windows all hold about twice
    theta), and without the test the tree splits them into several leaves. (At 600 points the
    emptiest of the root's ~570 windows dips below theta by chance: Q < 0, and only the noise of a
    root with too little budget had halted it.)"""
    points = np.random.default_rng(seed).uniform(-100.0, 100.0, size=(3000, 3)).astype(np.float32)
    budget, bounds = dpm_jax.Budget(8.0, 1e-4), (-100.0, 100.0)
    key = jax.random.key(seed)
    in_memory = dpm_jax.cluster(key, points, budget, bounds=bounds, config=STRUCTURE_CONFIG)
    streamed = cluster_stream(
        key, [points[:1250], points[1250:]], budget, bounds=bounds, config=STRUCTURE_CONFIG, chunk_rows=512
    )
    assert_same_release(in_memory, streamed)
    assert any(line.name.startswith("structure/") for line in in_memory.ledger)
    without = dpm_jax.cluster(
        key, points, budget, bounds=bounds, config=dataclasses.replace(STRUCTURE_CONFIG, structure_share=0.0)
    )
    assert int(in_memory.k) == 1 < int(without.k)


# The merge (dpm_jax.merge) at a budget where its gate opens on the first levels: tau_r = 4, half
# of the averaging's share of epsilon 8 on the valley statistics, the narrowest split window (which cuts one Gaussian).
MERGE_CONFIG = dpm_jax.DPMConfig(tau_r=4, merge_share=0.5, structure_share=0.0, split_window=1)


@pytest.mark.slow
def test_the_merge_streams_the_in_memory_release():
    # Long because: compiles the passes and the in-memory run (about 30 s, 2 cores).
    """4,000 points of one Gaussian: the tree (its narrowest split window) cuts it into leaves, the
    merge joins them (fewer clusters than leaves), and the streamed levels release the same valley
    statistics and clusters."""
    points = np.random.default_rng(2).normal(0.0, 15.0, size=(4000, 2)).astype(np.float32)
    budget, bounds, key = dpm_jax.Budget(8.0, 1e-4), (-100.0, 100.0), jax.random.key(3)
    in_memory = dpm_jax.cluster(key, points, budget, bounds=bounds, config=MERGE_CONFIG)
    streamed = cluster_stream(
        key, [points[:1500], points[1500:]], budget, bounds=bounds, config=MERGE_CONFIG, chunk_rows=512
    )
    assert_same_release(in_memory, streamed)
    tree = in_memory.tree
    leaves = int(np.sum(np.asarray(tree.reached) & ~np.asarray(tree.is_split)))
    assert any(line.name.startswith("merge/") for line in in_memory.ledger)
    assert 1 <= int(in_memory.k) < leaves
