"""Tests of the experiments: the top-k toy problem, the k-subset VAE, learning to explain."""
