"""LookaheadConfig: the validated parameters of one lookahead decoder (names follow arXiv 2402.02057)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

ATTENTION_PATHS = ("mask",)


@dataclass(frozen=True)
class LookaheadConfig:
    """Parameters of lookahead decoding.

    window_size (W): columns of the lookahead window (tokens guessed ahead per Jacobi level).
    ngram_size (N): length of the n-grams collected and verified; the window keeps N-1 levels.
    guess_set_size (G): most candidate continuations verified per step (the pool keeps at most G per key).
    pool_from_prompt: seed the n-gram pool with the prompt's own n-grams.
    pool_from_output: add the n-grams of accepted output to the pool as decoding goes on.
    attention: how a step's tree attention is computed ("mask": a 4-D additive mask through the model's own
        eager/sdpa attention).
    seed: seeds the choice of prompt tokens that fill the first window level (output never depends on it
        under greedy decoding; only the speed does).
    sampling_seed: seeds the draws of do_sample=True (verification and a sampled window) through a private
        `torch.Generator`, so the same seed gives the same output; None uses torch's default generator, so
        `torch.manual_seed(...)` before the call makes it reproducible, as with plain `generate`.
    sample_window: under do_sample=True, draw the window's next Jacobi level from the processed distributions
        instead of taking the argmax (speed only: output follows the same distribution either way).
    """

    window_size: int = 5
    ngram_size: int = 4
    guess_set_size: int = 5
    pool_from_prompt: bool = True
    pool_from_output: bool = True
    attention: str = "mask"
    seed: int = 0
    sampling_seed: int | None = None
    sample_window: bool = False

    def __post_init__(self) -> None:
        _check_int("window_size", self.window_size, 1, 1024)
        _check_int("ngram_size", self.ngram_size, 2, 64)
        _check_int("guess_set_size", self.guess_set_size, 0, 1024)
        _check_int("seed", self.seed, 0, 2**63 - 1)
        if self.sampling_seed is not None:
            _check_int("sampling_seed", self.sampling_seed, 0, 2**63 - 1)
        for name in ("pool_from_prompt", "pool_from_output", "sample_window"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.attention not in ATTENTION_PATHS:
            raise ValueError(f"attention must be one of {ATTENTION_PATHS}, got {self.attention!r}")

    @property
    def levels(self) -> int:
        """Number of Jacobi levels kept in the window (N - 1)."""
        return self.ngram_size - 1

    def max_step_tokens(self) -> int:
        """Upper bound of the tokens fed in one steady step: 1 + W(N-1) + G(N-1)."""
        return 1 + (self.window_size + self.guess_set_size) * self.levels

    def to_dict(self) -> dict:
        return asdict(self)


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
