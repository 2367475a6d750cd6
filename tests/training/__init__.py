"""Tests of training: the training command and runner, and the predict-then-optimize data."""
