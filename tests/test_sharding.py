"""Rows sharded over devices or processes give the release of one device (dpm_jax.sharding).

Four CPU devices are forced with XLA_FLAGS, which must be set before jax is
imported: the comparison runs in a subprocess, so the main pytest process keeps
its single device.
"""

import hashlib
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import dpm_jax
from dpm_jax.eval.datasets import synthetic_blobs
from dpm_jax.sharding import automatic_axes
from conftest import users_environment

SCRIPT = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    import jax, numpy as np, dpm_jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    from dpm_jax.eval.datasets import synthetic_blobs

    assert jax.device_count() == 4
    data = synthetic_blobs(n=600, d=4, num_blobs=6, std=1.0, seed=3)
    config = dpm_jax.DPMConfig(tau_r=4, sigma_step=0.02, num_sigmas=10)
    points = np.asarray(data.points, np.float32)

    def released(X):
        r = dpm_jax.cluster(jax.random.key(7), X, dpm_jax.Budget(1.0, 1e-6), bounds=data.bounds,
                            config=config)
        leaves = jax.tree_util.tree_leaves(r)
        return [np.asarray(a) for a in leaves], r.ledger

    reference, ledger = released(points)
    placements = {
        "explicit rows": (jax.make_mesh((4,), ("rows",)), P("rows")),
        "automatic rows": (jax.make_mesh((4,), ("rows",), axis_types=(AxisType.Auto,)), P("rows")),
        "rows and dims": (jax.make_mesh((2, 2), ("a", "b")), P("a", "b")),
    }
    for name, (mesh, spec) in placements.items():
        X = jax.device_put(points, NamedSharding(mesh, spec))
        assert len(X.sharding.device_set) == 4, name
        outputs, sharded_ledger = released(X)
        assert sharded_ledger == ledger, name
        for a, b in zip(reference, outputs):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (name, a, b)
        assert X.sharding.spec == spec  # the caller's array is untouched
    print("IDENTICAL")
""")


@pytest.mark.slow
def test_sharded_rows_give_the_release_of_one_device():
    # Long because: three compiles (one device, rows over 4 devices, a 2 x 2 mesh) in a fresh process.
    _prints_identical(SCRIPT)


def _prints_identical(script: str) -> None:
    """Run ``script`` in a fresh process at XLA's defaults (it adds its devices); it must print IDENTICAL."""
    env = users_environment()  # XLA's defaults: the comparison of programs users compile
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "IDENTICAL" in done.stdout


BLOCKS_SCRIPT = textwrap.dedent("""
    import os, re
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    import jax, numpy as np, dpm_jax
    import dpm_jax._arrays, dpm_jax.averaging, dpm_jax.tree
    from dpm_jax import api
    from jax.sharding import NamedSharding, PartitionSpec as P
    from dpm_jax.eval.datasets import synthetic_blobs

    # Blocks of 64 rows (runs of 4): one device loops over 10 contiguous, overlapping blocks,
    # four devices over 3 strided blocks of 8 runs (dpm_jax._arrays.row_blocks).
    dpm_jax.tree._BIN_BLOCK_ROWS = dpm_jax.averaging._BLOCK_ROWS = 64
    dpm_jax._arrays._MIN_RUN = 4
    data = synthetic_blobs(n=600, d=4, num_blobs=6, std=1.0, seed=3)
    config = dpm_jax.DPMConfig(tau_r=4, sigma_step=0.02, num_sigmas=10)
    calls = []
    engine = api._cluster_arrays
    api._cluster_arrays = lambda *a, **k: calls.append((a, k)) or engine(*a, **k)

    def released(X):
        r = dpm_jax.cluster(jax.random.key(7), X, dpm_jax.Budget(1.0, 1e-6), bounds=data.bounds, config=config)
        return [np.asarray(a).tobytes() for a in jax.tree_util.tree_leaves(r)]

    reference = released(np.asarray(data.points, np.float32))
    X = jax.device_put(np.asarray(data.points, np.float32), NamedSharding(jax.make_mesh((4,), ("rows",)), P("rows")))
    assert released(X) == reference
    assert [k["rows_sharded"] for _, k in calls] == [False, True]
    text = engine.lower(*calls[1][0], **calls[1][1]).compile().as_text()
    assert not re.search(r"\\ball-gather\\(", text), "the sharded rows were gathered onto every device"
    print("IDENTICAL")
""")


@pytest.mark.slow
def test_strided_row_blocks_keep_sharded_rows_in_place_and_the_release():
    # Long because: two compiles (one device, rows over 4 devices) in a fresh process.
    _prints_identical(BLOCKS_SCRIPT)


def test_automatic_axes_keeps_placement_and_values():
    x = jax.numpy.arange(8.0).reshape(4, 2)
    assert automatic_axes(x) is x  # not sharded over a mesh: unchanged
    mesh = jax.make_mesh((1,), ("rows",))
    sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("rows")))
    moved = automatic_axes(sharded)
    assert moved.sharding.mesh.axis_types == (jax.sharding.AxisType.Auto,)
    assert moved.sharding.spec == sharded.sharding.spec
    assert np.array_equal(np.asarray(moved), np.asarray(x))


def test_automatic_axes_is_a_no_op_on_automatic_meshes():
    mesh = jax.make_mesh((1,), ("rows",), axis_types=(jax.sharding.AxisType.Auto,))
    sharded = jax.device_put(
        np.ones((4, 2), np.float32), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("rows"))
    )
    assert automatic_axes(sharded) is sharded


PROCESS = textwrap.dedent("""
    import hashlib, sys
    import jax
    process_id, port = int(sys.argv[1]), sys.argv[2]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=process_id, initialization_timeout=120)
    import numpy as np, dpm_jax
    from dpm_jax.eval.datasets import synthetic_blobs
    from dpm_jax.sharding import rows_of_all_processes
    data = synthetic_blobs(n=600, d=3, num_blobs=6, std=1.0, seed=3)
    own = data.points[:250] if process_id == 0 else data.points[250:]  # unequal shares: padding
    rows = rows_of_all_processes(own)
    assert rows.points.shape == (700, 3) and not rows.points.is_fully_addressable
    r = dpm_jax.cluster(jax.random.key(7), rows.points, dpm_jax.Budget(1.0, 1e-6), bounds=data.bounds,
                        config=dpm_jax.DPMConfig(tau_r=4, sigma_step=0.02, num_sigmas=10), point_mask=rows.mask)
    released = [r.centers, r.counts, r.valid, r.k, r.split_interval_size, r.leaf_node, *r.tree]
    print("DIGEST", hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in released)).hexdigest())
    jax.distributed.shutdown()
""")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_processes_give_the_release_of_one_process_on_the_concatenated_rows():
    # Long because: two fresh processes compile the run (gloo collectives over loopback).
    env = users_environment()  # XLA's defaults: the comparison of programs users compile
    port = str(_free_port())
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, str(i), port],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    try:
        outputs = [worker.communicate(timeout=600) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
    for worker, (out, err) in zip(workers, outputs):
        assert worker.returncode == 0, err[-3000:]
    digests = [line.split()[1] for out, _ in outputs for line in out.splitlines() if line.startswith("DIGEST")]

    data = synthetic_blobs(n=600, d=3, num_blobs=6, std=1.0, seed=3)
    r = dpm_jax.cluster(
        jax.random.key(7),
        data.points,
        dpm_jax.Budget(1.0, 1e-6),
        bounds=data.bounds,
        config=dpm_jax.DPMConfig(tau_r=4, sigma_step=0.02, num_sigmas=10),
    )
    released = [r.centers, r.counts, r.valid, r.k, r.split_interval_size, r.leaf_node, *r.tree]
    expected = hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in released)).hexdigest()
    assert digests == [expected, expected]


def test_rows_of_one_process_are_the_rows_themselves(small_blobs):
    from dpm_jax.sharding import rows_of_all_processes

    rows = rows_of_all_processes(small_blobs.points)
    assert rows.points.shape == small_blobs.points.shape and bool(np.all(rows.mask))
    np.testing.assert_array_equal(np.asarray(rows.points), np.asarray(small_blobs.points, np.float32))
    with pytest.raises(ValueError, match=r"process 0: local rows must have shape \(n, d\)"):
        rows_of_all_processes(np.zeros(5))
