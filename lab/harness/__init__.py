"""What every study uses: paths, results files and their provenance, statistics, timed generation, methods, prompt
sets, model preparation, the benchmark runners and the figure style. Imports neither lab.studies nor lab.pipeline."""
