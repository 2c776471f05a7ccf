"""The decoding methods a benchmark compares (lab.harness.bench, the notebooks): plain greedy, lade with a config or
"auto",
prompt lookup, assisted generation; and `parse_config`, a lookahead config label to its key."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lade.auto import auto_config
from lade.config import LookaheadConfig
from lade.profile_cache import latency_profile


@dataclass(frozen=True)
class Method:
    """One decoding method. Build with the constructors below; `name` labels its rows.

    kind: "greedy" (plain model.generate, do_sample=False; beam search in a run with num_beams > 1), "lade"
    (lade.generate with `lookahead`), "prompt_lookup" (transformers prompt lookup decoding) or "assisted"
    (transformers assisted generation).
    """

    name: str
    kind: str
    lookahead: LookaheadConfig | str | None = None  # a LookaheadConfig, or "auto:TASK" until resolved
    generate_kwargs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def greedy(cls) -> "Method":
        return cls("greedy", "greedy")

    @classmethod
    def plain(cls, num_beams: int = 1) -> "Method":
        """The reference of a run: plain greedy, or plain beam search with `num_beams` beams (named beam(k))."""
        return cls.greedy() if num_beams == 1 else cls(f"beam({num_beams})", "greedy")

    @classmethod
    def lade(cls, ngram_size: int, window_size: int, guess_set_size: int, **config: Any) -> "Method":
        """Lookahead with fixed (N, W, G); extra LookaheadConfig fields by keyword."""
        cfg = LookaheadConfig(window_size=window_size, ngram_size=ngram_size, guess_set_size=guess_set_size, **config)
        suffix = "".join(f",{k}={v}" for k, v in sorted(config.items()))
        return cls(f"lade({ngram_size},{window_size},{guess_set_size}{suffix})", "lade", cfg)

    @classmethod
    def from_key(cls, key: tuple[int, ...]) -> "Method":
        """Lookahead with a config key (see `parse_config`), named `lade(N,W,G[,C,M])`."""
        return cls(f"lade({','.join(map(str, key))})", "lade", LookaheadConfig.from_key(key))

    @classmethod
    def from_label(cls, label: str) -> "Method":
        """lade with a config label (LookaheadConfig.label, e.g. "4,5,5" or "merged/16/adaptive"), named
        lade(label), the label as the config writes it."""
        config = LookaheadConfig.from_label(label)
        return cls(f"lade({config.label})", "lade", config)

    @classmethod
    def auto(cls, task: str = "mixed") -> "Method":
        """Lookahead with the (N, W, G) lade.cost chooses for the model and device (resolved before timing)."""
        return cls("lade-auto" if task == "mixed" else f"lade-auto({task})", "lade", f"auto:{task}")

    @classmethod
    def prompt_lookup(cls, num_tokens: int = 10) -> "Method":
        return cls(f"pld({num_tokens})", "prompt_lookup", generate_kwargs={"prompt_lookup_num_tokens": num_tokens})

    @classmethod
    def assisted(cls, assistant_model, name: str = "assisted") -> "Method":
        return cls(name, "assisted", generate_kwargs={"assistant_model": assistant_model})

    @classmethod
    def parse(cls, spec: str) -> "Method":
        """'greedy', 'auto' / 'auto:TASK', 'pld' / 'pld:K', 'lade:LABEL' (a LookaheadConfig label: 'N,W,G[,C,M]' or
        'DRAFT/BUDGET[,w=W][/adaptive]'), as in the CLI."""
        head, _, arg = spec.strip().partition(":")
        if head == "greedy" and not arg:
            return cls.greedy()
        if head == "auto":
            return cls.auto(arg or "mixed")
        if head == "pld":
            return cls.prompt_lookup(int(arg) if arg else 10)
        if head == "lade" and arg:
            return cls.from_label(arg)
        raise ValueError(f"unknown method {spec!r}: use greedy, auto, auto:TASK, pld, pld:K, lade:N,W,G[,C,M] or "
                         "lade:DRAFT/BUDGET[,w=W][/adaptive]")

    def config_label(self) -> str:
        """The resolved config's label (LookaheadConfig.label: 'N,W,G[,C,M]', 'plain', 'merged/16/adaptive', ...),
        'auto:TASK' where lade resolves it per call (beam search), '' for methods that are not lade."""
        if isinstance(self.lookahead, LookaheadConfig):
            return self.lookahead.label
        return self.lookahead if self.kind == "lade" and self.lookahead else ""

    def resolved(self, model, latency=None) -> "Method":
        """This method with lookahead 'auto:TASK' replaced by the config chosen for `model`; latency: the latency
        model (q -> seconds) auto chooses with, None: `model`'s measured profile (lade.auto_config)."""
        if not isinstance(self.lookahead, str):
            return self
        task = self.lookahead.partition(":")[2]
        return Method(self.name, self.kind, auto_config(model, task=task, latency=latency), self.generate_kwargs)


def measure_row_profiles(model, methods: Iterable[Method], rows: Iterable[int]) -> None:
    """Measure (or load from the cache) the latency profiles of steps of each row count > 1 in `rows` (a batch's
    rows, or beam search's beams), which "auto" prices several-row steps with (lade/handover.py, lade/beams.py), and
    the one-row profile at the longer context, which prices calls with long prompts (lade.profile.ContextLatency),
    so that no timed call measures one; nothing unless a method's lookahead is "auto" or "auto:TASK" (or, for the
    long-context profile, an adaptive config, whose steps are priced too)."""
    methods = list(methods)
    if any(isinstance(m.lookahead, str) for m in methods):
        for count in sorted(set(rows) - {1}):
            latency_profile(model, rows=count)
    if any(isinstance(m.lookahead, str) or getattr(m.lookahead, "adaptive", False) for m in methods):
        latency_profile(model, long=True)


def reference_method(names: Iterable[str]) -> str:
    """The reference among a run's method names: the plain method (greedy, or beam(k) in a beam-search run; not its
    A/A row, lab.harness.stats.aa_name)."""
    (name,) = {n for n in names if n == "greedy" or (n.startswith("beam(") and n.endswith(")") and " " not in n)}
    return name


def parse_config(text: str) -> tuple[int, ...]:
    """'N,W,G' -> (N, W, G); 'N,W,G,C,M' -> (N, W, G, pool capacity, pool match tokens): the key of the lookahead
    config that LookaheadConfig.from_label builds from the label (validated)."""
    rule = ("a lookahead config is 'N,W,G' (three integers, e.g. 4,5,5) or 'N,W,G,C,M' (plus pool capacity and "
            f"match tokens, e.g. 8,0,2,16,2), got {text!r}")
    try:
        config = LookaheadConfig.from_label(str(text))
    except ValueError as err:
        raise ValueError(f"{rule}: {err}") from None
    if not config.enabled or config.draft != "lookahead":
        raise ValueError(rule)
    return config.key
