"""Evaluation of dpm_jax, apart from the engine: data sets, metrics, baselines, the speed
benchmark and the empirical privacy auditor.

Nothing in the engine (``dpm_jax.cluster`` and the modules it runs) imports this
package; it imports the engine. Its outputs are evaluations, not DP releases: the
metrics and the non-private baselines read the data freely.

* :mod:`dpm_jax.eval.datasets`: the paper's synthetic data and real data sets with
  public bounds;
* :mod:`dpm_jax.eval.metrics`: silhouette, accuracy, inertia, the KMeans distance;
* :mod:`dpm_jax.eval.baselines`: k-means, DP-Lloyd, the KMeans references and the
  plain NumPy DPM;
* :mod:`dpm_jax.eval.benchmark`: the speed benchmark (``dpm-jax bench``);
* :mod:`dpm_jax.eval.audit`: empirical lower bounds on the epsilon actually spent.
"""
