"""`python -m lab.pipeline.ready [--no-model]`: the checks that end scripts/setup.sh, in one process (importing torch
and
transformers costs more than the checks themselves): the frozen prompt sets against data/prompts/MANIFEST.json, then
the embedded SmolLM2-135M-Instruct prepared in $LADE_CACHE unless --no-model."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TextIO

from lab.harness.models import prepare_embedded_model
from lab.harness.prompts import verify_frozen


def embedded_model_ready(stream: TextIO | None = None) -> Path:
    """Prepare the embedded model (idempotent) and say where it is, as set-up's step (on `stream`, default stdout)."""
    start = time.perf_counter()
    folder = prepare_embedded_model()
    print(f"[setup] embedded model ready: {folder} ({time.perf_counter() - start:.0f} s)", file=stream)
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.pipeline.ready", description=__doc__.split("\n")[0])
    parser.add_argument("--no-model", action="store_true", help="skip preparing the embedded model")
    args = parser.parse_args(argv)
    print("[setup] frozen prompt sets verified:", ", ".join(verify_frozen()))
    if not args.no_model:
        embedded_model_ready()


if __name__ == "__main__":
    main()
