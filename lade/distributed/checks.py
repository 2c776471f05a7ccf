"""Up-front checks of lookahead parallelism: a process group, a shardable config, the same inputs everywhere."""

from __future__ import annotations

import zlib

import torch
import torch.distributed as dist
from transformers import GenerationConfig
from transformers.generation.logits_process import LogitsProcessorList

from ..config import LookaheadConfig
from ..drafters import registered


def require_group() -> tuple[int, int]:
    """(rank, world size) of the default process group, or a clear error."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "lade.distributed needs an initialised torch.distributed process group: launch with "
            "`torchrun --nproc_per_node R script.py` and call torch.distributed.init_process_group('gloo' or 'nccl', "
            "timeout=datetime.timedelta(seconds=...)) first; for one process use lade.generate"
        )
    return dist.get_rank(), dist.get_world_size()


def check_shardable(config: LookaheadConfig, world: int) -> None:
    """Each rank needs a window column of its own (a pool-only or disabled config has no window to share)."""
    if config.enabled and 0 < config.window_size < world:
        raise ValueError(
            f"window_size={config.window_size} cannot be sharded across {world} ranks (each rank needs at least one "
            f"window column): set window_size >= {world} (e.g. {world} * columns per rank) or launch fewer ranks"
        )


def check_parallel_inputs(input_ids: torch.Tensor) -> None:
    if input_ids.shape[0] != 1:
        raise ValueError(f"lade.distributed decodes one prompt at a time (got a batch of {input_ids.shape[0]}): loop "
                         "over the prompts, or use lade.generate for batches in one process")


def check_parallel_generation(gen: GenerationConfig, config: LookaheadConfig) -> None:
    """What lookahead parallelism refuses on top of single-process lade."""
    if config.enabled and not registered(config.draft).same_on_every_rank:
        raise ValueError(
            "lade.distributed shards one draft across ranks, so every rank must draft alike; "
            f"draft={config.draft!r} learns from each rank's own logits and timings, so ranks would draft "
            "differently: use draft='lookahead' (lookahead_config='auto' picks one)"
        )
    if gen.do_sample and config.sample_window:
        raise ValueError(
            "lade.distributed takes the window's Jacobi levels by argmax: set sample_window=False (sampling stays "
            "lossless: rank 0 verifies the candidates with lossless sampling)"
        )
    if gen.return_dict_in_generate and (gen.output_scores or gen.output_logits):
        raise ValueError(
            "lade.distributed does not return scores/logits (only the winning rank holds them); drop output_scores "
            "/ output_logits or use lade.generate in one process"
        )
    if gen.max_time is not None:
        raise ValueError("max_time would stop ranks at different steps; use max_new_tokens with lade.distributed")


INPUT_FINGERPRINT = ("world_size", "lookahead_config", "prompt_length", "prompt_ids", "attention_mask", "max_length",
                     "do_sample", "eos_token_id", "logits_processors", "model_weights_sum")
CONFIG_FINGERPRINT = ("resolved_lookahead_config",)


def input_fingerprint(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, gen: GenerationConfig,
                      processors: LogitsProcessorList, requested, world: int) -> dict[str, float]:
    """Small numbers that must agree on every rank before decoding starts, all exact in float64 (requested: the
    lookahead_config as given, e.g. "auto", before rank 0 resolves it)."""
    eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
    mask = b"" if attention_mask is None else attention_mask.detach().cpu().to(torch.int64).numpy().tobytes()
    return {
        "world_size": world,
        "lookahead_config": zlib.crc32(repr(requested).encode()),
        "prompt_length": input_ids.shape[-1],
        "prompt_ids": zlib.crc32(input_ids.detach().cpu().to(torch.int64).numpy().tobytes()),
        "attention_mask": zlib.crc32(mask),
        "max_length": gen.max_length or 0,
        "do_sample": float(bool(gen.do_sample)),
        "eos_token_id": zlib.crc32(repr(eos).encode()),
        "logits_processors": zlib.crc32(repr([type(p).__name__ for p in processors]).encode()),
        "model_weights_sum": sum(float(p.detach().float().sum()) for p in model.parameters()),
    }


def config_fingerprint(config: LookaheadConfig) -> dict[str, float]:
    return {"resolved_lookahead_config": zlib.crc32(repr(config).encode())}


def check_same_everywhere(values: dict[str, float] | None, local_error: Exception | None,
                          names: tuple[str, ...], device: torch.device) -> None:
    """all_gather every rank's `values` (named `names`; None where its own checks failed with `local_error`), so
    that all ranks raise together: the failing ranks their own error, the others a ValueError naming them or naming
    the values that differ."""
    row = [0.0] * len(names) if values is None else [float(values[name]) for name in names]
    mine = torch.tensor([float(values is None), *row], dtype=torch.float64, device=device)  # [1 + F]
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    table = torch.stack(parts).cpu()  # [R, 1 + F]
    if local_error is not None:
        raise local_error
    refused = table[:, 0].nonzero().flatten().tolist()
    if refused:
        raise ValueError(f"rank(s) {refused} refused their inputs (see the error on those ranks); stopping here too")
    differ = [(name, table[:, 1 + i].tolist()) for i, name in enumerate(names)
              if not bool((table[:, 1 + i] == table[0, 1 + i]).all())]
    if differ:
        detail = "; ".join(f"{name} per rank = {column}" for name, column in differ)
        raise ValueError(
            f"ranks disagree on {detail}. Every rank must call lade.distributed with the same model weights, prompt, "
            "lookahead_config and generation settings"
        )
