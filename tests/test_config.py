"""DPMConfig: the paper's defaults and clear errors for invalid hyper-parameters."""

import dataclasses
import math
import pathlib
import re

import pytest

import dpm_jax
from dpm_jax import DPMConfig


def test_defaults_are_the_papers():
    config = DPMConfig()
    # Section 6.1 and Section 5.2.
    assert config.tau_e is None
    # Not the paper's: the depth is chosen from a noisy count (issue 14), up to the paper's tau_r = 7.
    assert config.tau_r == "auto" and config.max_depth == 7 and config.padded_depth == 7
    assert config.at_depth(5) == DPMConfig(tau_r=5)
    assert config.alpha == 5.0 and config.t == 0.3 and math.isclose(config.q, 1 / 12)
    assert config.epsilon_shares == (0.04, 0.18, 0.18, 0.6)
    assert config.delta_shares == (0.2, 0.8)
    assert config.percentile == 65.0 and config.interval_factor == 0.5
    # The authors' sigmas 0.5, 1.0, ..., 29.5 on a range of 200.
    assert len(config.sigma_grid) == 59
    assert math.isclose(config.sigma_grid[0] * 200, 0.5) and math.isclose(config.sigma_grid[-1] * 200, 29.5)
    assert config.max_clusters == 128
    assert config.max_splits_per_dim == 128  # the cap; the grid alone would allow 1 / (0.5 * 0.0025) = 800
    assert config.finest_interval == 1 / 128
    # Not the paper's: the split candidates follow each node's cell (issue 14); "paper" is selectable.
    assert config.split_grid == "cell" and config.candidates_per_dim == 256 and config.lattice_step is None
    assert config.split_window == 6  # the library's choice, not the paper's (its interval is Algorithm 2's beta)
    assert DPMConfig(split_grid="paper").candidates_per_dim == 128
    # Not the paper's: under "auto" the default tau_e is n~ / 2**(depth + 1) (issue 27); a fixed tau_r
    # keeps the paper's n~ / 2**tau_r, and at_depth gives the fixed depth's config.
    assert config.leaf_slack == 1 and config.tau_e_halvings == 1
    assert DPMConfig(tau_r=5).tau_e_halvings == 0 and DPMConfig(leaf_slack=0).tau_e_halvings == 0
    assert DPMConfig(leaf_slack=3).at_depth(4) == DPMConfig(tau_r=4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(t=0.1, q=0.1), "t >= 2q"),
        (dict(q=0.5), "q must satisfy"),
        (dict(q=0.0), "q must satisfy"),
        (dict(alpha=0.0), "alpha must be > 0"),
        (dict(alpha=-1.0), "alpha must be > 0"),
        (dict(tau_r=0), "tau_r must be >= 1"),
        (dict(epsilon_shares=(0.1, 0.2, 0.3, 0.3)), "epsilon_shares must sum to 1"),
        (dict(delta_shares=(0.5, 0.6)), "delta_shares must sum to 1"),
        (dict(epsilon_shares=(0.5, 0.5, 0.0, 0.0)), "positive"),
        (dict(percentile=100.0), "percentile"),
        (dict(sigma_step=0.0), "sigma_step"),
        (dict(num_sigmas=0), "num_sigmas"),
        (dict(interval_max_dims=0), "interval_max_dims"),
        (dict(max_splits_per_dim=0), "max_splits_per_dim"),
        (dict(split_grid="global"), "split_grid must be one of"),
        (dict(lattice_step=0.0), "lattice_step must be None or a positive"),
        (dict(lattice_step=1.0, split_grid="paper"), "lattice_step needs split_grid='cell'"),
        (dict(split_window=0), "split_window"),
        (dict(split_window=3, split_grid="paper"), "split_window needs split_grid='cell'"),
        (dict(leaf_slack=-1), "leaf_slack must be in"),
        (dict(leaf_slack=0, tau_r=5), "leaf_slack is for tau_r='auto'"),
    ],
)
def test_invalid_values_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DPMConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs", [dict(tau_r=2.5), dict(alpha="5"), dict(t=float("nan")), dict(tau_r=True), dict(leaf_slack=1.0)]
)
def test_wrong_types_raise_type_error(kwargs):
    with pytest.raises(TypeError):
        DPMConfig(**kwargs)


def test_config_is_hashable_for_jit():
    assert hash(DPMConfig()) == hash(DPMConfig())


def test_every_field_carries_its_help_and_a_parser_that_reads_its_default_back():
    for field in dataclasses.fields(DPMConfig):
        assert field.metadata["help"], field.name  # the command line's and the estimator's one source
        if field.default is not None:
            text = ",".join(map(str, field.default)) if isinstance(field.default, tuple) else str(field.default)
            assert field.metadata["parse"](text) == field.default, field.name
    assert dataclasses.fields(DPMConfig)[0].metadata["parse"]("3") == 3


def test_the_grid_shape_is_the_one_place_the_split_grids_are_told_apart():
    paper, cell = DPMConfig(split_grid="paper").grid_shape, DPMConfig().grid_shape
    assert paper.estimates_interval and not cell.estimates_interval
    assert (paper.candidates_per_dim, cell.candidates_per_dim) == (128, 256)
    assert (paper.drawable_per_dim, cell.drawable_per_dim) == (128, 255)  # finest beta 1/128; inner boundaries
    coarse = DPMConfig(split_grid="paper", sigma_step=0.05, interval_factor=0.5).grid_shape
    assert coarse.drawable_per_dim == 40  # 1 / 0.025: the grid at its finest interval size
    package = pathlib.Path(dpm_jax.__file__).parent
    readers = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if re.search(r"split_grid\s*[!=]=|\bCELL_GRID\b|\bPAPER_GRID\b", path.read_text())
    ]
    assert readers == ["config.py"]
