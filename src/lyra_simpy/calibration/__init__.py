"""Calibration: profile CSVs (DESIGN §4), fitting the ``profile`` cost model, converters,
and checking the roofline against published measurements."""
