"""DP synthetic data from partitions of the public box.

"Differentially Private Synthetic Data Using KD-Trees" (Kreačić et al.): Algorithm 1 (grid),
Algorithms 2-3 (adaptive KD-tree), Algorithm 5 (implicit empty cells), and DPM's own tree as
a generator. The entry point is :func:`dpm_jax.synthesize` (:mod:`dpm_jax.synth.api`); this
package imports nothing on its own.
"""
