"""Lookahead parallelism (lade.distributed): 2 ranks, gloo on CPU, loopback only, every launch under a timeout.

The multi-rank checks run in tests/dist_worker.py; a hang would show up here as TimeoutExpired, never as a
stuck suite.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers.cache_utils import DynamicCache

import lade
import lade.distributed
from lade.distributed.shard import own_candidates, own_columns, shard_layout
from lade.layout import build_layout
from lade.model_call import ModelCall
from lade.tree import TokenTree
from tiny_models import forward_all_rows, random_prompt, tiny_model

TESTS = Path(__file__).parents[1]  # the shared helpers (dist_worker.py) live at the top of tests/
WORKER = str(TESTS / "dist_worker.py")
LAUNCH_TIMEOUT_S = 300


def _env(**extra: str) -> dict:
    path = os.pathsep.join([str(TESTS.parent), str(TESTS)])
    return dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONPATH=path, **extra)


@pytest.fixture(scope="module")
def torchrun_exact_and_errors(tmp_path_factory) -> str:
    """One torchrun launch for all the checks (process start-up dominates on a small machine)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", WORKER,
           "exact", "sampling", "errors", "strategy"]
    run = subprocess.run(cmd, env=_env(LADE_CACHE=str(tmp_path_factory.mktemp("lade-cache"))), capture_output=True,
                         text=True, timeout=LAUNCH_TIMEOUT_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def test_two_ranks_equal_single_process_greedy(torchrun_exact_and_errors):
    """Each rank asserted token equality with plain greedy and per-step acceptance equal to single-process lade
    over 16 prompts (4 configs, 2 architectures, a processor, an EOS stop)."""
    for rank in (0, 1):
        assert f"RANK {rank} EXACT OK cases=16" in torchrun_exact_and_errors


def test_two_ranks_sample_as_single_process(torchrun_exact_and_errors):
    """6 sampled prompts (3 warper settings, 4 configs): output and per-step acceptance equal to single-process
    lade with the same sampling_seed on both ranks, and some steps accept several sampled tokens."""
    for rank in (0, 1):
        assert f"RANK {rank} SAMPLING OK cases=6" in torchrun_exact_and_errors


def test_clear_errors_on_every_rank(torchrun_exact_and_errors):
    """Unshardable window, mismatched prompt / config, a sampled window, and a config refused on one rank only: each
    raises a ValueError on both ranks (no rank left waiting), and the group still decodes afterwards."""
    for rank in (0, 1):
        assert f"RANK {rank} ERRORS OK" in torchrun_exact_and_errors


def test_the_shared_loop_under_lookahead_parallelism(torchrun_exact_and_errors):
    """On both ranks: lookahead_config="auto" (timed on rank 0, broadcast) equals plain greedy; a disabled config feeds
    one token per step; a flash_attention_2-configured model runs lade's split path and stays exact; a left-padded
    prompt equals plain greedy with its mask; a batch is refused on every rank."""
    for rank in (0, 1):
        assert f"RANK {rank} STRATEGY OK" in torchrun_exact_and_errors


@pytest.mark.parametrize("mode", ["fail", "fail_last"])
def test_rank_failure_is_an_error_on_every_rank(mode):
    """Rank 1 raises mid-decoding, or on the very last token (when rank 0 has nothing left to decode); rank 0 must
    raise too, long before the 600 s gloo timeout. Plain processes (no torchrun agent that would kill the survivors)
    so each rank's own exit is observed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, WORKER, mode], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    try:
        outputs = [p.communicate(timeout=LAUNCH_TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [1, 1], outputs
    assert "RANK 1 ERROR RuntimeError: injected failure on rank 1" in outputs[1]
    assert "RANK 0 ERROR PeerFailure: lade.distributed: rank(s) [1] failed" in outputs[0]


def test_no_process_group_is_a_clear_error():
    model = tiny_model("llama")
    config = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4)
    with pytest.raises(ValueError, match="needs an initialised torch.distributed process group"):
        lade.distributed.generate(model, random_prompt(0), config, max_new_tokens=5)


@torch.no_grad()
def test_shard_rows_equal_single_process_rows():
    """A rank's window-top and tree rows, fed after two re-fed pending tokens, give the logits of the same rows
    of the single-process step whose cache already holds those tokens: the shard drops only invisible tokens."""
    model = tiny_model("llama", "eager")
    ids = random_prompt(1)  # [1, 24]
    window = torch.randint(3, 90, (2, 5), generator=torch.Generator().manual_seed(0))  # [L=2, W=5]
    candidates = [(ids[0, 5].item(), 9, 4), (11, 12, 13), (ids[0, 5].item(), 8, 3), (21, 22, 23), (5, 6, 7)]
    root = int(ids[0, -1])
    full_call = ModelCall(model, DynamicCache(config=model.config))
    full_call.prefill(ids[:, :-1])
    full = build_layout(root, window, TokenTree(candidates), ids.device)
    full_logits = forward_all_rows(full_call, full, ids.shape[1] - 1)  # [q, V]
    for rank in (0, 1):
        call = ModelCall(model, DynamicCache(config=model.config))
        call.prefill(ids[:, :-3])
        columns = own_columns(5, rank, 2)
        tree = TokenTree(own_candidates(candidates, rank, 2))
        shard = shard_layout(ids[0, -3:].tolist(), window, columns, tree, ids.device)
        logits = forward_all_rows(call, shard, ids.shape[1] - 3)  # [q_rank, V]
        torch.testing.assert_close(logits[shard.root_row], full_logits[0], atol=1e-5, rtol=1e-5)
        top_level = full_logits[[1 + 5 + j for j in columns]]  # level 1 of the full [2, 5] window
        torch.testing.assert_close(logits[shard.top_rows], top_level, atol=1e-5, rtol=1e-5)
        full_nodes = _nodes_by_path(full.tree)
        for path, node in _nodes_by_path(tree).items():
            torch.testing.assert_close(logits[shard.tree_start + node], full_logits[full.tree_start + full_nodes[path]],
                                       atol=1e-5, rtol=1e-5)


def _nodes_by_path(tree: TokenTree) -> dict[tuple[int, ...], int]:
    return {tuple(tree.tokens[n] for n in path): node for node, path in enumerate(tree.paths)}
