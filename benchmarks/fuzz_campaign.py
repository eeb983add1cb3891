"""A longer fuzzing campaign of ``dpm_jax.cluster`` (outside CI).

Draws free *scenarios* (n in 1..3000, d in 1..200, tau_r, t, q, alpha, shares,
sigma grid, tau_e, budget) from a seeded NumPy generator; for each scenario (one
compilation) hypothesis fuzzes the values (dtype, pattern, bounds, key) with the
strategies and property checks of ``tests/fuzzing.py``. Then it fuzzes invalid
inputs, which must raise ValueError/TypeError, with many cheap examples.

    python benchmarks/fuzz_campaign.py --minutes 20 --examples-per-scenario 8 \
        --out benchmarks/results/fuzz_campaign.json

Prints a summary and writes JSON: scenarios, cases run, failures (with the
scenario and hypothesis' falsifying example), wall time and the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import pathlib
import sys
import time
import traceback

import jax
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpm_jax
from dpm_jax.averaging import leaf_sums_release
from dpm_jax.budget import allocate

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))  # the tests' fuzzing tools
import fuzzing as fuzz  # noqa: E402


def random_scenario(rng: np.random.Generator) -> fuzz.Scenario:
    """A free draw of the static arguments (shape, budget, config) that ``cluster`` accepts.

    Budgets the exact samplers cannot certify are refused by ``allocate`` with a clear
    error (tests/test_fuzz.py checks that); they are redrawn here.
    """
    while True:
        scenario = _draw_scenario(rng)
        try:
            allocation = allocate(scenario.budget, scenario.config, scenario.d)
            leaf_sums_release(allocation.average_epsilon, allocation.average_delta, scenario.d)
        except ValueError:
            continue
        return scenario


def _draw_scenario(rng: np.random.Generator) -> fuzz.Scenario:
    n = int(np.exp(rng.uniform(0, math.log(3000))))
    d = int(np.exp(rng.uniform(0, math.log(200))))
    q = float(rng.uniform(0.01, 0.45))
    shares = rng.dirichlet(np.ones(4)) * 0.96 + 0.01
    shares[-1] = 1.0 - shares[:-1].sum()
    delta_share = float(rng.uniform(0.05, 0.95))
    config = dpm_jax.DPMConfig(
        tau_r=int(rng.choice([1, 2, 3, 4, 5, 7], p=[0.2, 0.25, 0.2, 0.15, 0.1, 0.1])),
        tau_e=None if rng.random() < 0.6 else float(rng.uniform(-10, 0.2 * n + 1)),
        alpha=float(np.exp(rng.uniform(math.log(0.01), math.log(50)))),
        q=q,
        t=float(rng.uniform(2 * q, 1.0)),
        epsilon_shares=tuple(float(s) for s in shares),
        delta_shares=(delta_share, 1.0 - delta_share),
        sigma_step=float(np.exp(rng.uniform(math.log(0.004), math.log(0.3)))),
        num_sigmas=int(rng.integers(1, 61)),
        interval_max_dims=None if rng.random() < 0.3 else int(rng.integers(1, 33)),
    )
    budget = dpm_jax.Budget(
        float(np.exp(rng.uniform(math.log(1e-4), math.log(1e3)))),
        float(np.exp(rng.uniform(math.log(1e-12), math.log(0.9)))),
    )
    return fuzz.Scenario(n, d, budget, config)


def fuzz_scenario(scenario: fuzz.Scenario, examples: int, seed: int) -> int:
    """Hypothesis over the values of one scenario; returns the number of cases run."""
    ran = []

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
    )
    @given(data=st.data())
    def run(data):
        bounds = data.draw(fuzz.public_bounds(scenario.d), label="bounds")
        points = data.draw(fuzz.points_for(scenario.n, scenario.d, bounds, scenario.config), label="points")
        key = jax.random.key(data.draw(st.integers(0, 2**31 - 1), label="seed"))
        fuzz.check_cluster_properties(key, points, scenario.budget, bounds, scenario.config)
        ran.append(1)

    np.random.seed(seed % 2**32)
    run()
    return len(ran)


def _fuzz_invalid(strategies: dict, check, examples: int) -> dict:
    """Run one invalid-input check of tests/fuzzing.py on ``examples`` random draws."""
    checked = []

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
    )
    @given(**strategies)
    def run(**kwargs):
        check(**kwargs)
        checked.append(1)

    try:
        run()
        return dict(cases=len(checked), failure=None)
    except Exception as error:
        return dict(cases=len(checked), failure=repr(error))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="time budget for valid inputs")
    parser.add_argument("--examples-per-scenario", type=int, default=8)
    parser.add_argument("--invalid-examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON output path")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    started = time.time()
    scenarios, cases, failures = [], 0, []
    machine = (
        f"{platform.machine()} {os.cpu_count()} cores, {platform.system()}, "
        f"jax {jax.__version__} on {jax.default_backend()}"
    )

    def write(report):
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as handle:
                json.dump(report, handle, indent=1)

    while time.time() - started < 60 * args.minutes:
        scenario = random_scenario(rng)
        description = dict(
            n=scenario.n,
            d=scenario.d,
            epsilon=scenario.budget.epsilon,
            delta=scenario.budget.delta,
            config=repr(scenario.config),
        )
        print(
            f"[{time.time() - started:7.1f}s] scenario {len(scenarios) + 1:3d}: n={scenario.n:5d} "
            f"d={scenario.d:3d} tau_r={scenario.config.tau_r} eps={scenario.budget.epsilon:.3g}",
            end=" ",
            flush=True,
        )
        tick = time.time()
        try:
            ran = fuzz_scenario(scenario, args.examples_per_scenario, seed=len(scenarios))
        except Exception as error:  # a property failed: record it and go on
            ran = 0
            failures.append(dict(scenario=description, error=repr(error), traceback=traceback.format_exc(limit=3)))
        jax.clear_caches()  # every scenario compiles anew; keep the process small
        cases += ran
        scenarios.append(dict(description, cases=ran, seconds=round(time.time() - tick, 2)))
        print(f"-> {ran} cases ({len(failures)} failures so far)", flush=True)
        write(
            dict(
                machine=machine,
                seed=args.seed,
                finished=False,
                scenarios=len(scenarios),
                valid_cases=cases,
                failures=failures,
                scenario_log=scenarios,
            )
        )
    valid_seconds = time.time() - started

    invalid = {}
    for name, (strategies, check) in fuzz.INVALID_INPUTS.items():
        invalid[name] = _fuzz_invalid(strategies, check, args.invalid_examples)

    report = dict(
        machine=machine,
        finished=True,
        seed=args.seed,
        minutes=args.minutes,
        scenarios=len(scenarios),
        valid_cases=cases,
        valid_seconds=round(valid_seconds, 1),
        failures=failures,
        invalid=invalid,
        invalid_cases=sum(v["cases"] for v in invalid.values()),
        scenario_log=scenarios,
    )
    print(
        f"\n{len(scenarios)} scenarios, {cases} valid-input cases in {valid_seconds:.0f}s, "
        f"{len(failures)} failing scenarios; invalid-input cases: "
        + ", ".join(f"{k}: {v['cases']}{' FAILED' if v['failure'] else ''}" for k, v in invalid.items())
    )
    for failure in failures:
        print("\nFAILURE", failure["scenario"], "\n", failure["traceback"])
    write(report)
    return 1 if failures or any(v["failure"] for v in invalid.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
