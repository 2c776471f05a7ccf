"""One module (or small group of modules) per notebook and per one-off experiment: what it runs, its results
schema, its --plan estimate, its figures and its findings. Imports lab.harness, never lab.pipeline."""
