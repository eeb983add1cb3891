#!/usr/bin/env bash
# Install the minimum JAX and NumPy that pyproject.toml declares into a throwaway virtual
# environment and run a fast subset of the tests against this checkout.
#
# Where it runs: by hand on a developer's machine (it downloads jax/jaxlib from the package
# index, about 100 MB, and takes 5-10 minutes on a shared 2-core machine), before a change of
# the declared minimum and before a release; not in .ci/run, whose time goes to the full suite
# on the pinned JAX. Results of the last run: docs/usage.md, "Supported versions".
#
#   bash tools/check_minimum_versions.sh            # the minimums from pyproject.toml
#   bash tools/check_minimum_versions.sh 0.5.3      # try another JAX (to move the minimum)
set -euo pipefail
cd "$(dirname "$0")/.."
declared=$(python3 -c 'import re,tomllib;d=tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"];print(next(re.sub(r"^jax>=","",x) for x in d if x.startswith("jax>=")))')
numpy_min=$(python3 -c 'import re,tomllib;d=tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"];print(next(re.sub(r"^numpy>=","",x) for x in d if x.startswith("numpy>=")))')
jax_version=${1:-$declared}
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
"$venv/bin/pip" install -q "jax==$jax_version" "jaxlib==$jax_version" "numpy==$numpy_min" pytest pytest-xdist hypothesis
"$venv/bin/python" -c "import jax, numpy; print('jax', jax.__version__, 'numpy', numpy.__version__)"
# The fast subset: bit-identity of every integer output against the recording (tests/test_golden.py),
# x64 mode, array-likes, labels, warnings, the accountant. Run from the checkout: it imports this copy.
# Left out: a caller's own jax.jit of cluster under x64, which jax 0.5.3 cannot lower (docs/usage.md).
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_golden.py tests/test_usability.py tests/test_accountant.py \
    -k "not stream_and_fit and not callers_own_jit"
