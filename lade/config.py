"""LookaheadConfig: the validated parameters of one lookahead decoder (names follow arXiv 2402.02057)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .drafters.registry import drafter_names, registered

ATTENTION_PATHS = ("auto", "mask", "split", "flex")
AUTO_BUDGET = 24  # most draft nodes the adaptive planner considers per step under "auto"
AUTO_DRAFT = "merged"  # the adaptive drafter "auto" runs
MAX_STEP_TOKENS = 4096  # most tokens one step may feed: 1 + (W + G)(N - 1); beyond it a step is a prefill, not a guess


@dataclass(frozen=True, kw_only=True)
class LookaheadConfig:
    """Parameters of lookahead decoding (keyword-only: LookaheadConfig(window_size=5, ngram_size=4, ...)).

    draft: the registered drafter that proposes each step's candidates (lade.drafters.register; lade/drafters/):
        "lookahead" (the paper's): the Jacobi window and the n-gram pool, G continuations of the last token per step;
        "retrieval": continuations of the longest suffix of the output seen before in the prompt, output or source;
        "recycling": a tree of successors from the model's own top-k predictions at every row of earlier steps;
        "merged": retrieval, recycling and (with window_size > 0) the window's n-grams in one tree;
        "corpus": a lade.Corpus of earlier requests alone (the three above draft from one too when a call passes
        corpus=; lade/corpus.py).
        Every built-in one but lookahead plans a tree of at most `step_budget` nodes by estimated acceptance.
    draft_options: the drafter's own settings (None: its defaults; a dict of its fields, or its options object),
        validated by the drafter's options class, e.g. draft_options=dict(recycling_width=4) for "recycling".
    adaptive: (drafters registered adaptive: retrieval, recycling, merged, corpus) cut each step's tree where the
        expected tokens per second of this model on this device peak, down to a plain one-token step; what
        `lade.auto_config` returns.
    step_budget: most draft nodes a step of a tree-planning draft (every built-in one but lookahead) feeds; under beam
        search (num_beams > 1, lade/beams.py), most draft nodes under each beam.
    window_size (W): columns of the lookahead window (tokens guessed ahead per Jacobi level); None takes the
        drafter's default (5 for the lookahead draft, 0, no window, for the others). With draft="lookahead", 0
        drops the window: only n-grams from the prompt and the output are verified (prompt-lookup style).
    ngram_size (N): length of the n-grams collected and verified; the window keeps N-1 levels.
    guess_set_size (G): most candidate continuations verified per step.
    pool_capacity: continuations the pool keeps per key (None: G, the reference behaviour). Above G, the G
        verified are chosen by context: first those last seen after the same two tokens, then the most recent.
    pool_match_tokens: context a candidate must share with the output to be verified: 1 (its first token, the
        reference behaviour) or 2 (the token before it too, as prompt lookup decoding matches). With
        window_size=0 and 2, a step with no such candidate feeds one token, as plain decoding does.
    pool_from_prompt: seed the n-gram pool with the prompt's own n-grams.
    pool_from_output: add the n-grams of accepted output to the pool as decoding goes on.
    attention: how a step's tree attention is computed. "mask": a 4-D additive mask through the model's own
        eager/sdpa attention; "split": the KV-cache prefix through a fused kernel with no mask (flash-attn on
        CUDA when installed, else PyTorch SDPA) plus the small in-step block under the tree mask, merged
        exactly by log-sum-exp (the path for flash_attention_2 models); "flex": PyTorch FlexAttention with a
        block mask (compiled on CUDA, unfused on CPU); "auto": split for flash-attention models, flex for
        flex_attention models on CUDA, mask for eager/sdpa models.
    seed: seeds the choice of prompt tokens that fill the first window level (output never depends on it
        under greedy decoding; only the speed does).
    sampling_seed: keys the per-position noise of do_sample=True (lade/sampling.py), so the same seed gives the same
        output whatever the drafts, step sizes or timings; None draws a key from torch's default generator, so
        `torch.manual_seed(...)` before the call makes it reproducible, as with plain `generate`.
    sample_window: under do_sample=True, draw the window's next Jacobi level from the processed distributions
        instead of taking the argmax (speed only: output follows the same distribution either way); it costs an
        extra processors call per step and pays, if at all, at low temperature.
    enabled: False runs plain decoding (one token per step) through the same loop; what
        `lade.auto_config` returns when no lookahead config is predicted to beat plain decoding.
    """

    window_size: int | None = None
    ngram_size: int = 4
    guess_set_size: int = 5
    pool_from_prompt: bool = True
    pool_from_output: bool = True
    pool_capacity: int | None = None
    pool_match_tokens: int = 1
    attention: str = "auto"
    seed: int = 0
    sampling_seed: int | None = None
    sample_window: bool = False
    enabled: bool = True
    draft: str = "lookahead"
    adaptive: bool = False
    step_budget: int = 16
    draft_options: object = None

    def __post_init__(self) -> None:
        drafter = registered(self.draft)  # a clear error naming the registered drafters
        if self.window_size is None:
            object.__setattr__(self, "window_size", drafter.window_size)
        _check_int("window_size", self.window_size, 0, 1024)
        _check_int("step_budget", self.step_budget, 1, 1024)
        _check_int("ngram_size", self.ngram_size, 2, 64)
        _check_int("guess_set_size", self.guess_set_size, 0, 1024)
        _check_int("seed", self.seed, 0, 2**63 - 1)
        if self.pool_capacity is not None:
            _check_int("pool_capacity", self.pool_capacity, max(self.guess_set_size, 1), 1 << 16)
        _check_int("pool_match_tokens", self.pool_match_tokens, 1, 2)
        if self.sampling_seed is not None:
            _check_int("sampling_seed", self.sampling_seed, 0, 2**63 - 1)
        for name in ("pool_from_prompt", "pool_from_output", "sample_window", "enabled", "adaptive"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.attention not in ATTENTION_PATHS:
            raise ValueError(f"attention must be one of {ATTENTION_PATHS}, got {self.attention!r}")
        object.__setattr__(self, "draft_options", drafter.options_for(self.draft_options))
        if self.adaptive and not drafter.adaptive:
            adaptive = [name for name in drafter_names() if registered(name).adaptive]
            raise ValueError(f"adaptive steps plan a tree from the latency model, which draft={self.draft!r} does not: "
                             f"use one of {adaptive} with adaptive=True, or adaptive=False")
        if drafter.check is not None:
            drafter.check(self)  # the drafter's own rules on the shared fields
        if self.max_step_tokens() > MAX_STEP_TOKENS:
            raise ValueError(
                f"LookaheadConfig(window_size={self.window_size}, ngram_size={self.ngram_size}, guess_set_size="
                f"{self.guess_set_size}, draft={self.draft!r}) feeds up to {self.max_step_tokens()} tokens per step, "
                f"above lade's limit of {MAX_STEP_TOKENS}: reduce window_size, guess_set_size, ngram_size or "
                "step_budget"
            )

    @property
    def key(self) -> tuple[int, ...]:
        """(N, W, G), plus (pool capacity, match tokens) where the pool differs from the reference one: names the
        config in results and in the cost prior (`from_key` inverts it)."""
        base = (self.ngram_size, self.window_size, self.guess_set_size)
        if self.pool_capacity is None and self.pool_match_tokens == 1:
            return base
        return base + (self.pool_capacity or self.guess_set_size, self.pool_match_tokens)

    @classmethod
    def from_key(cls, key: tuple[int, ...], **fields) -> "LookaheadConfig":
        """(N, W, G) or (N, W, G, pool capacity, match tokens) -> config (other fields by keyword)."""
        if len(key) not in (3, 5):
            raise ValueError(f"a config key is (N, W, G) or (N, W, G, pool_capacity, pool_match_tokens), got {key!r}")
        n, w, g, *pool = key
        if pool:
            fields = dict(fields, pool_capacity=pool[0], pool_match_tokens=pool[1])
        return cls(window_size=w, ngram_size=n, guess_set_size=g, **fields)

    @property
    def label(self) -> str:
        """Names the config in results: its key "N,W,G[,C,M]" for the lookahead draft, else e.g.
        "merged/16/adaptive" (draft, step budget, with ",w=W" for a window)."""
        if not self.enabled:
            return "plain"
        if self.draft == "lookahead":
            return ",".join(map(str, self.key))
        window = f",w={self.window_size}" if self.window_size else ""
        return f"{self.draft}/{self.step_budget}{window}{'/adaptive' if self.adaptive else ''}"

    @classmethod
    def from_label(cls, label: str, **fields) -> "LookaheadConfig":
        """Inverse of `label`: "N,W,G[,C,M]", "plain", or "DRAFT/BUDGET[,w=W][/adaptive]"."""
        if label == "plain":
            return cls(enabled=False, **fields)
        head, _, rest = label.partition("/")
        if not rest:
            parts = head.split(",")
            if not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"a config label is 'N,W,G', 'N,W,G,C,M', 'plain' or 'DRAFT/BUDGET[,w=W][/adaptive]' "
                                 f"(e.g. 4,5,5 or merged/16/adaptive), got {label!r}")
            return cls.from_key(tuple(int(p) for p in parts), **fields)
        budget, _, mode = rest.partition("/")
        budget, _, window = budget.partition(",w=")
        if not budget.isdigit() or (window and not window.isdigit()) or mode not in ("", "adaptive"):
            raise ValueError(f"a draft label is DRAFT/BUDGET[,w=W][/adaptive], e.g. merged/16,w=4/adaptive; got "
                             f"{label!r}")
        return cls(draft=head, step_budget=int(budget), window_size=int(window or 0), adaptive=mode == "adaptive",
                   **fields)

    @property
    def levels(self) -> int:
        """Number of Jacobi levels kept in the window (N - 1)."""
        return self.ngram_size - 1

    def max_step_tokens(self) -> int:
        """Upper bound of the tokens fed in one steady step: the last token, N-1 window levels of W, and the
        drafter's tree: 1 + (W + G)(N - 1) for the lookahead draft (G guesses of N-1 tokens), 1 + W(N-1) +
        step_budget for the tree-planning drafts."""
        return 1 + self.window_size * self.levels + registered(self.draft).max_tree_nodes(self)

    def to_dict(self) -> dict:
        return asdict(self)


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
