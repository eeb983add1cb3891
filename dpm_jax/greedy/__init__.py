"""The unified greedy k-means / k-median ("Making Old Things New", central model)."""

from dpm_jax.greedy.api import KMeansResult, elbow, kmeans

__all__ = ["KMeansResult", "elbow", "kmeans"]
