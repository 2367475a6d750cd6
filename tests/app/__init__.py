"""Tests of the application layer: command configurations, sessions, results, commands."""
