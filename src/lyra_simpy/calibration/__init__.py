"""Calibration: checking and fitting cost models against measurements."""
