"""Calibration: profile CSVs (DESIGN §4), fitting the ``profile`` cost model, converters,
and checking the roofline against published measurements.

The public entry points (what ``lyra-simpy calibrate`` does, as functions):
:func:`calibrate` fits a profile CSV (and writes the fit file a scenario's
``cost: {name: profile, path: ...}`` reads), :func:`format_report` prints its R² and
errors per phase, :func:`residuals_figure` draws the fit against the profile.
"""

from lyra_simpy.calibration.fitfile import calibrate, format_report, residuals_figure

__all__ = ["calibrate", "format_report", "residuals_figure"]
