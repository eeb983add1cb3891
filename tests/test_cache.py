"""The persistent compilation cache (dpm_jax.cache): on by default for the library's programs only,
opt-out, never in the tests.

Each case runs in a fresh process with its own temporary cache directory (the
choice is made at import), so the user's cache is neither read nor written.
"""

import os
import subprocess
import sys
import textwrap

import jax

import dpm_jax
import pytest
from dpm_jax import cache

RUN = textwrap.dedent("""
    import hashlib, jax, numpy as np
    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None)
    import dpm_jax
    dpm_jax.cache._MIN_COMPILE_SECONDS = 0.0  # cache every program: which ones land must not depend on timing
    from dpm_jax.eval.datasets import synthetic_blobs
    data = synthetic_blobs(n=300, d=3, num_blobs=4, std=1.0, seed=1)
    r = dpm_jax.cluster_stream(jax.random.key(3), data.points, dpm_jax.Budget(1.0, 1e-6), bounds=data.bounds,
                               config=dpm_jax.DPMConfig(tau_r=3, sigma_step=0.02, num_sigmas=10), chunk_rows=128)
    digest = hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in jax.tree_util.tree_leaves(r)))
    print(dpm_jax.cache.compilation_cache_dir(), len(hits), digest.hexdigest())
""")


def _run(code: str, **env_changes) -> list[str]:
    # Whether a program is written depends on its compile time (dpm_jax.cache's minimum), which the
    # suite's compiler settings shorten: the scripts that look at what lands on disk set the minimum
    # to 0, so that every program an entry point compiles is written (more than users' processes
    # write), and a test that nothing private reaches the disk sees all of them.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (cache.OPT_OUT_VARIABLE, cache.DIRECTORY_VARIABLE, "JAX_COMPILATION_CACHE_DIR")
    }
    env.update(env_changes)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


@pytest.mark.slow
def test_second_process_loads_the_compiled_program_and_gets_the_same_release(tmp_path):
    # Long because: one cold compile of a small configuration in a fresh process, then a warm one.
    directory = str(tmp_path / "xla")
    cold_dir, cold_hits, cold_digest = _run(RUN, DPM_JAX_CACHE_DIR=directory)
    assert cold_dir == directory and int(cold_hits) == 0
    assert any(name.startswith("jit__children_of_chunk") for name in os.listdir(directory))
    warm_dir, warm_hits, warm_digest = _run(RUN, DPM_JAX_CACHE_DIR=directory)
    assert int(warm_hits) >= 1  # the streamed engine's programs came from disk
    assert warm_digest == cold_digest  # and computes the same bits


def test_opt_out_variable_leaves_the_cache_off(tmp_path):
    out = _run(
        "import dpm_jax; print(dpm_jax.cache.compilation_cache_dir())",
        DPM_JAX_NO_COMPILATION_CACHE="1",
        DPM_JAX_CACHE_DIR=str(tmp_path / "never"),
    )
    assert out == ["None"] and not (tmp_path / "never").exists()


def test_a_cache_configured_for_jax_is_kept(tmp_path):
    theirs = str(tmp_path / "theirs")
    out = _run(
        "import dpm_jax; print(dpm_jax.cache.compilation_cache_dir())",
        JAX_COMPILATION_CACHE_DIR=theirs,
        DPM_JAX_CACHE_DIR=str(tmp_path / "ours"),
    )
    assert out == [theirs] and not (tmp_path / "ours").exists()


FIRST_ENTRY = (
    "import dpm_jax, os, sys; print(os.path.exists(sys.argv[1]))\n"
    "with dpm_jax.cache.library_programs(): pass\n"
    "print(dpm_jax.cache.compilation_cache_dir())"
)


def test_an_unwritable_cache_directory_leaves_the_cache_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = _run(FIRST_ENTRY.replace("sys.argv[1]", repr(str(blocker / "xla"))), DPM_JAX_CACHE_DIR=str(blocker / "xla"))
    assert out == ["False", "None"]  # not created, so off once an entry point runs


def test_import_creates_nothing_on_disk_and_the_first_entry_point_makes_a_private_directory(tmp_path):
    home = tmp_path / "xdg"
    out = _run(FIRST_ENTRY.replace("sys.argv[1]", repr(str(home))), XDG_CACHE_HOME=str(home))
    assert out == ["False", str(home / "dpm_jax" / "xla")]
    assert (home / "dpm_jax" / "xla").stat().st_mode & 0o777 == 0o700


def test_the_test_process_uses_no_cache():
    assert cache.compilation_cache_dir() is None and jax.config.jax_compilation_cache_dir is None


def test_enable_and_disable_from_code(tmp_path):
    try:
        assert cache.enable_compilation_cache(tmp_path / "mine") == tmp_path / "mine"
        assert dpm_jax.cache.compilation_cache_dir() == str(tmp_path / "mine")
    finally:
        cache.disable_compilation_cache()
    assert cache.compilation_cache_dir() is None


CLOSED_OVER = textwrap.dedent("""
    import pathlib, sys, zlib, jax, jax.numpy as jnp, numpy as np
    import dpm_jax
    dpm_jax.cache._MIN_COMPILE_SECONDS = 0.0  # as above: every program of an entry point is written
    X = np.random.default_rng(7).uniform(-1, 1, (500, 3)).astype(np.float32)
    config = dpm_jax.DPMConfig(tau_r=3)
    run = lambda key: dpm_jax.cluster(key, X, dpm_jax.Budget(1.0, 1e-6), bounds=(-1.0, 1.0), config=config)
    jax.jit(lambda s: jnp.sum(jnp.asarray(X) * s))(1.0)  # a caller's program closing over X
    jax.jit(lambda key: run(key).centers)(jax.random.key(0))  # ... that also calls cluster
    run(jax.random.key(0))  # the in-memory engine: shaped by the data, never cached
    dpm_jax.cluster_stream(jax.random.key(0), X, dpm_jax.Budget(1.0, 1e-6), (-1.0, 1.0), config=config, chunk_rows=128)
    try:
        import zstandard
        unpack = lambda raw: zstandard.ZstdDecompressor().decompress(raw, max_output_size=2**30)
    except ImportError:
        unpack = zlib.decompress  # JAX compresses entries with zstandard when installed, else zlib
    entries = [path for path in pathlib.Path(sys.argv[1]).iterdir() if path.is_file()]
    rows = X.tobytes()[4000:4064]  # 16 coordinates of the data, a byte string no program would hold otherwise
    print(len(entries), sum(rows in unpack(path.read_bytes()) for path in entries),
          any(path.name.startswith("jit__children_of_chunk") for path in entries),
          any(path.name.startswith("jit__cluster_arrays") for path in entries))
""")


@pytest.mark.slow
def test_programs_closing_over_data_are_never_written_to_the_librarys_cache(tmp_path):
    # Long because: three fresh processes, each compiling cluster twice (under the caller's jit and alone).
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    entries, holding_data, stream_cached, engine_cached = _run(
        CLOSED_OVER.replace("sys.argv[1]", repr(str(ours))), DPM_JAX_CACHE_DIR=str(ours)
    )
    assert int(entries) >= 1 and stream_cached == "True"  # the library's chunk-shaped programs are cached...
    assert engine_cached == "False"  # (the in-memory engine's are shaped by n: never)
    assert int(holding_data) == 0  # ... the caller's, which hold X as a constant, are not
    # The detector finds the data where JAX caches every program (the caller's own configuration):
    # a closed-over array is written to the cache, which is why the library scopes its cache.
    entries, holding_data, _, _ = _run(
        CLOSED_OVER.replace("sys.argv[1]", repr(str(theirs))),
        JAX_COMPILATION_CACHE_DIR=str(theirs),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    assert int(holding_data) >= 2  # both of the caller's programs
    # After cluster returns, the cache is off again for the process's other programs.
    out = _run(
        "import jax, dpm_jax; from dpm_jax.eval.datasets import synthetic_blobs; "
        "data = synthetic_blobs(n=100, d=2, num_blobs=2, std=1.0, seed=1); "
        "dpm_jax.cluster_stream(jax.random.key(0), data.points, dpm_jax.Budget(1.0, 1e-6), bounds=data.bounds, "
        "config=dpm_jax.DPMConfig(tau_r=2), chunk_rows=64); "
        "print(jax.config.jax_compilation_cache_dir, dpm_jax.cache.compilation_cache_dir())",
        DPM_JAX_CACHE_DIR=str(tmp_path / "third"),
    )
    assert out == ["None", str(tmp_path / "third")]


NEIGHBOUR_SIZES = textwrap.dedent("""
    import pathlib, sys, warnings, jax, numpy as np
    import dpm_jax
    dpm_jax.cache._MIN_COMPILE_SECONDS = 0.0  # cache every program: which ones land must not depend on timing
    from dpm_jax.cli.main import main
    warnings.simplefilter("ignore")
    n, out = int(sys.argv[1]), sys.argv[2]
    X = np.random.default_rng(0).uniform(-1, 1, (n, 3))
    budget = dpm_jax.Budget(1.0, 1e-6)
    for grid in ("paper", "cell"):  # Algorithm 2's sorted columns (paper) and the cell grid
        config = dpm_jax.DPMConfig(tau_r=2, split_grid=grid, sigma_step=0.02, num_sigmas=10)
        dpm_jax.cluster(jax.random.key(0), X, budget, (-1.0, 1.0), config=config)
        dpm_jax.cluster_stream(jax.random.key(0), X, budget, (-1.0, 1.0), config=config, chunk_rows=128)
    np.save(out + "/data.npy", X)
    for stream in ([], ["--stream", "--chunk-rows", "128"]):
        main(["cluster", out + "/data.npy", "--epsilon", "1", "--delta", "1e-6", "--bounds", "-1", "1",
              "--tau-r", "2", "--seed", "0", "--out", out + "/release.json", *stream])
    print(*sorted(path.name for path in pathlib.Path(dpm_jax.cache.compilation_cache_dir()).iterdir()))
""")


@pytest.mark.slow
def test_nothing_on_disk_tells_neighbouring_sizes_apart(tmp_path):
    # Long because: two fresh processes, each compiling the in-memory and the streamed engine twice.
    # The cache key of an entry hashes its program, shapes included: a program compiled for the data's
    # n rows would have another key for n + 1. The entries' compressed bytes are not compared: XLA's
    # serialised executables differ between two runs of the same program and data (measured: 18 of 77).
    names = {}
    # 256 / 257: one chunk of 128 rows more, and a last chunk of 1 row instead of a full one, so a program
    # shaped by the number of chunks or by the last chunk's rows would be told apart.
    for n in (256, 257):
        directory = tmp_path / "xla"  # the same path every time: it is part of JAX's cache keys
        names[n] = _run(
            NEIGHBOUR_SIZES.replace("sys.argv[1]", str(n)).replace("sys.argv[2]", repr(str(tmp_path))),
            DPM_JAX_CACHE_DIR=str(directory),
        )
        for path in directory.iterdir():
            path.unlink()
    assert names[256] == names[257]
    assert names[256] and any(name.startswith("jit__gap_histogram_of_block") for name in names[256])
    assert not any(name.startswith("jit__cluster_arrays") for name in names[256])  # shaped by n: not cached
