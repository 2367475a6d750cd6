"""Tests of the documentation: the site builds, and the README, pages and tutorials run as printed."""
