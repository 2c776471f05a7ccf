"""Above the studies: the study registry (built by importing them), experiment specs, --plan, run orchestration,
README generation and publishing."""
