"""gradsync_analysis: read gradsync result files (HDF5), run parameter studies, plot.

Modules: spec (study TOML), runner (scripts/study run), results (readers of bench/train/model
files), studyfile (DIR/study.h5), model (calibrate/compare/predict stage), plots (matplotlib,
Agg), analyze (plots + conclusions of a study folder), conclusions (per-experiment text),
flagship (the main job), cli.
"""
