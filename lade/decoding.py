"""lade as a transformers `custom_generate` callable: checks, rows, the loop (lade/loop.py), the output.

`lookahead_generate` decodes in one process; lade.distributed runs the same function with its own strategy
(`lookahead_strategy=`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import GenerationConfig
from transformers.cache_utils import Cache
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .auto import auto_task, resolve_config
from .batch_scores import batch_outputs
from .beams import beam_config, beam_generate
from .cache import crop, new_cache, outlives_call, self_attention_cache, slotted
from .checks import check_corpus, check_corpus_draft, check_generation
from .compat import CACHE_KWARG, generate_call_arguments, pad_token_tensor, repetition_penalty_for_row
from .config import LookaheadConfig
from .corpus import Corpus
from .drafters import RowContext, make_drafter
from .drafters.allocation import StepSizer
from .drafters.step_cost import StepCost
from .encoder_decoder import EncoderDecoderCall
from .handover import drafts_can_pay, learned_rows, plain_generate
from .loop import Run, decode
from .model_call import ModelCall
from .outputs import output_type
from .pricing import Costs
from .profile import cached_rows, call_context, device_costs
from .rope import Positions, frequencies_kept
from .rows import Row, pad_rows
from .sampling import TokenChooser
from .strategy import LocalStrategy, Strategy
from .vocabulary import logits_width
from .windows import check_window, step_room


def lookahead_generate(
    model,
    input_ids: torch.LongTensor,  # [B, P], left-padded when B > 1 (with attention_mask in model_kwargs)
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    synced_gpus: bool = False,
    streamer=None,
    lookahead_config: LookaheadConfig | dict | str | None = None,
    lookahead_streamer=None,
    lookahead_source_ids: torch.Tensor | None = None,
    lookahead_strategy=None,
    lookahead_latency: Callable[[float], float] | None = None,
    lookahead_model_call: type[ModelCall] | None = None,
    corpus: Corpus | None = None,
    **model_kwargs,
):
    """transformers `custom_generate` entry point.

    The lookahead parameters come from `lookahead_config=` (a keyword of `model.generate` once this callable is
    the custom_generate), else from `generation_config.lookahead_config`. `lookahead_streamer=` receives the prompt,
    then every new token once, in order, after every check passed (a `streamer=` given to model.generate gets the
    prompt from transformers itself, before lade runs). lookahead_source_ids ([1, S]): an encoder-decoder model's
    source tokens, whose n-grams also seed the pool (`lade.generate` passes them). lookahead_strategy: builds the
    loop's strategy from (model, input_ids, generation_config, logits_processor, model_kwargs, lookahead_config);
    None decodes in this process (lade.distributed passes lookahead parallelism's). lookahead_latency: the latency
    model (q -> seconds of a q-token step, e.g. a lade.cost.LatencyProfile, whose measured host work it carries)
    that "auto" and adaptive drafts use; None measures this model's profile once (cached, lade.profile).
    lookahead_model_call: the class of a decoder-only model's call (a ModelCall subclass, e.g. one that compiles or
    replays forwards); None: ModelCall. corpus: a lade.Corpus of earlier requests the drafts also come from
    (lade/corpus.py), which learns every row's prompt and output at the end of the call.
    """
    # 1. resolve: every refusal (no forward, no streamer call), the config, the strategy, the step costs
    gen, processors = generation_config, logits_processor
    call = _resolve(model, input_ids, processors, stopping_criteria, gen, synced_gpus, streamer, lookahead_config,
                    lookahead_streamer, lookahead_strategy, lookahead_latency, corpus, model_kwargs)
    # 2. the loop: transformers' own where "auto" finds no draft pays a batch (lade/handover.py), beam search's
    # (lade/beams.py), or lookahead's (lade/loop.py); each returns what model.generate returns
    if call.loop == "beams":
        model_call = _model_call(model, call.cache, model_kwargs, call.config.attention,
                                 lookahead_model_call or ModelCall)
        return beam_generate(model, model_call, input_ids, call.pads, call.config, gen, processors, stopping_criteria,
                             model_kwargs.get("attention_mask"), lookahead_source_ids, call.costs, call.cache_outlives)
    if call.loop == "transformers":
        _stream_prompt(call, input_ids)
        out = plain_generate(model, input_ids, processors, stopping_criteria, gen, call.synced_gpus, call.streamer,
                             model_kwargs, call.cache_outlives)
        learned = learned_rows(out, input_ids.shape[1], call.pads, gen) if corpus is not None else []
    else:
        source = lookahead_source_ids[0] if lookahead_source_ids is not None else None
        out, rows = _lookahead(model, call, input_ids, gen, processors, stopping_criteria, source, model_kwargs,
                               lookahead_model_call or ModelCall, corpus)
        learned = [row.tokens.tolist() for row in rows] if corpus is not None else []
    # 3. the corpus learns each row's prompt (without its padding) and output
    for tokens, pad in zip(learned, call.pads):
        corpus.add(tokens, prompt_length=input_ids.shape[1] - pad)
    return out


@dataclass
class Resolved:
    """What `_resolve` decided for one call."""

    strategy: Strategy
    pads: list[int]  # [B] each row's left padding
    config: LookaheadConfig
    loop: str  # "transformers" | "beams" | "lookahead"
    costs: Costs | None  # the step costs adaptive drafts and "auto" beam search price with (None: not priced)
    streamer: object | None  # the one streamer
    prompt_streamed: bool  # whether transformers put the prompt into it already
    cache: Cache
    cache_outlives: bool  # whether the cache outlives the call (lade.cache.outlives_call): compacted at its end
    synced_gpus: bool
    keep_scores: bool  # return_dict_in_generate with output_scores


def _resolve(model, input_ids: torch.Tensor, processors: LogitsProcessorList, stopping_criteria: StoppingCriteriaList,
             gen: GenerationConfig, synced_gpus: bool, streamer, lookahead_config, lookahead_streamer,
             lookahead_strategy, latency: Callable[[float], float] | None, corpus: Corpus | None,
             model_kwargs: dict) -> Resolved:
    """Every refusal (no forward, no streamer call), then the configuration and the loop ("auto" may time the model,
    keeping the RoPE state plain decoding would start from). Every price of the call (the config "auto" picks, the
    handover, step sizing, beam steps) is at the call's mean context (lade.profile.call_context)."""
    beams = gen.num_beams is not None and gen.num_beams > 1
    if beams and lookahead_strategy is not None:
        raise ValueError("lookahead parallelism decodes greedily or by sampling: set num_beams=1, or decode beams "
                         "in one process")
    if beams and corpus is not None:
        raise ValueError("beam search drafts from the model's own successors and the prompt, not from a corpus: drop "
                         "corpus=, or set num_beams=1")
    strategy: Strategy = LocalStrategy() if lookahead_strategy is None else \
        lookahead_strategy(model, input_ids, gen, processors, model_kwargs, lookahead_config)
    caller = generate_call_arguments()  # what transformers does not hand a callable custom_generate
    streamer, prompt_streamed = _streamer(caller, streamer, lookahead_streamer)
    cache = model_kwargs.get(CACHE_KWARG) if model_kwargs.get(CACHE_KWARG) is not None else new_cache(model)
    synced = bool(synced_gpus or caller.get("synced_gpus"))
    check_corpus(corpus, logits_width(model), model.config.model_type, lookahead_strategy is not None)
    with frequencies_kept(model):
        pads, config = strategy.setup(
            lambda: check_generation(model, input_ids, gen, processors, stopping_criteria, model_kwargs, cache,
                                     synced, streamer, caller.get("assistant_model")),
            lambda: beam_config(lookahead_config, gen, model) if beams else
            resolve_config(lookahead_config, gen, model, adaptive=strategy.adaptive_drafts, latency=latency,
                           allowed=strategy.accepts, max_step_tokens=step_room(model, cache, gen),
                           context=call_context(input_ids.shape[1], gen.max_length)),
        )
        requested = lookahead_config if lookahead_config is not None else getattr(gen, "lookahead_config", None)
        n, task = input_ids.shape[0], auto_task(requested)  # rows per step: B, or B * k beams
        context = call_context(input_ids.shape[1], gen.max_length)  # after the checks: max_length is valid
        costs = functools.cache(lambda: device_costs(model, latency, context=context))  # measured (or read) once
        priced = _priced(config, requested, latency, beams)
        handed_over = task is not None and lookahead_strategy is None and n > 1 and not beams and \
            not drafts_can_pay(costs(), n, task, () if latency is not None else cached_rows(model))
        loop = "transformers" if handed_over else "beams" if beams else "lookahead"
        priced_costs = costs() if priced and loop != "transformers" else None
        if priced_costs is not None:
            priced_costs.forward(n, 1)  # any profile its n-row steps price with is measured here, before decoding
    check_corpus_draft(corpus, config)
    check_window(model, cache, gen, 1 if loop == "transformers" else config.max_step_tokens())
    return Resolved(strategy, pads, config, loop, priced_costs, streamer, prompt_streamed, cache,
                    outlives_call(cache, gen, bool(caller)), synced,
                    bool(gen.return_dict_in_generate and gen.output_scores))


def _streamer(caller: dict, streamer, lookahead_streamer) -> tuple[object | None, bool]:
    """-> (the one streamer, whether transformers put the prompt into it already)."""
    prompt_streamed = caller.get("streamer") is not None
    if prompt_streamed and lookahead_streamer is not None:
        raise ValueError("pass one streamer: streamer= or lookahead_streamer=, not both")
    return lookahead_streamer or caller.get("streamer") or streamer, prompt_streamed


def _priced(config: LookaheadConfig, requested, latency: Callable[[float], float] | None, beams: bool) -> bool:
    """Whether the call's steps are priced: adaptive drafts, and "auto" beam search (fixed beam configs draft as
    configured); a latency model passed to a call that prices nothing is refused."""
    if latency is not None and not config.adaptive and not isinstance(requested, str):
        raise ValueError("lookahead_latency is used by lookahead_config='auto' and by adaptive drafts "
                         f"(adaptive=True); {config.label!r} is neither: drop lookahead_latency")
    if beams:
        return isinstance(requested, str)
    return config.adaptive and config.enabled


def _stream_prompt(call: Resolved, input_ids: torch.Tensor) -> None:
    if call.streamer is not None and not call.prompt_streamed:
        call.streamer.put(input_ids.cpu())


def _lookahead(model, call: Resolved, input_ids: torch.Tensor, gen: GenerationConfig,
               processors: LogitsProcessorList, stopping_criteria: StoppingCriteriaList, source: torch.Tensor | None,
               model_kwargs: dict, decoder_only: type[ModelCall], corpus: Corpus | None) -> tuple[object, list[Row]]:
    """lade's own loop (lade/loop.py) over one Row per sequence -> (what model.generate returns, the rows)."""
    if corpus is not None:
        corpus.bind(logits_width(model), model.config.model_type)
    rows = _rows(model, input_ids, call, gen, processors, source, corpus)
    model_call = _model_call(model, call.cache, model_kwargs, call.config.attention, decoder_only)
    run = Run(model_call, model_call.cache, TokenChooser.for_generation(bool(gen.do_sample), call.config,
                                                                       input_ids.device),
              call.strategy, stopping_criteria, call.streamer, call.strategy.new_stats(), call.keep_scores,
              Positions.of(model), model.device, _sizer(call.config, call.costs, rows))
    prompt_mask = model_kwargs.get("attention_mask") if any(call.pads) else None
    _stream_prompt(call, input_ids)
    start = time.perf_counter()
    with call.strategy.guard(), slotted(call.cache, call.cache_outlives):
        decode(run, rows, input_ids, prompt_mask, self_attention_cache(call.cache).get_seq_length())
    call.strategy.finish()
    run.stats.total_time_s = time.perf_counter() - start
    if call.streamer is not None:
        call.streamer.end()
    return _output(model, rows, gen, run, call.strategy, prompt_mask, call.config.attention), rows


def _sizer(config: LookaheadConfig, costs: Costs | None, rows: list[Row]) -> StepSizer | None:
    """Adaptive drafters that rank their nodes (`offer`, `rest`) are sized together, for the whole batch's step; None
    where drafts are not priced or a drafter plans its own steps. A batch's step of q tokens in all is priced as a
    step of its B rows feeding q / B tokens each."""
    if costs is None or not all(hasattr(row.drafter, "offer") and hasattr(row.drafter, "rest") for row in rows):
        return None
    per_row = costs.rows(len(rows))
    return StepSizer(StepCost(lambda q: per_row(q / len(rows)), costs.host_s),
                     getattr(config.draft_options, "correct_latency", True))


def _rows(model, input_ids: torch.Tensor, call: Resolved, gen: GenerationConfig, processors: LogitsProcessorList,
          source: torch.Tensor | None, corpus: Corpus | None) -> list[Row]:
    """One Row per sequence of input_ids [B, P], each with its own drafter and view of the processors."""
    keep_logits = bool(gen.return_dict_in_generate and gen.output_logits)
    vocab, pads, costs = logits_width(model), call.pads, call.costs
    latency, host_s = (costs.rows(1), costs.host_s) if costs is not None else (None, 0.0)
    return [Row(b, pads[b], input_ids[b : b + 1].long(), input_ids.shape[1],  # long: what plain generate returns
                make_drafter(call.config, RowContext(input_ids[b, pads[b] :], source, vocab, latency, host_s, corpus)),
                _row_processors(processors, b), call.strategy.new_stats(), [] if call.keep_scores else None,
                [] if keep_logits else None)
            for b in range(input_ids.shape[0])]


def _model_call(model, cache: Cache, model_kwargs: dict, attention: str, decoder_only: type[ModelCall]) -> ModelCall:
    """The decoder-only call (of class `decoder_only`), or an encoder-decoder model's decoder call over the encoder
    output generate prepared."""
    if not model.config.is_encoder_decoder:
        return decoder_only(model, cache, attention)
    if decoder_only is not ModelCall:
        raise ValueError("lookahead_model_call replaces the call of decoder-only models; drop it for encoder-decoder "
                         "models")
    if model_kwargs.get("encoder_outputs") is None:
        raise ValueError("encoder-decoder lookahead needs the encoder_outputs that model.generate prepares; call "
                         "model.generate(..., custom_generate=lade.lookahead_generate) or lade.generate")
    return EncoderDecoderCall(model, cache, attention, model_kwargs["encoder_outputs"],
                              model_kwargs.get("attention_mask"))


def _output(model, rows: list[Row], gen: GenerationConfig, run: Run, strategy: Strategy,
            prompt_mask: torch.Tensor | None, attention: str):
    """What `model.generate` returns: the sequences, or with return_dict_in_generate an output object (scores and
    logits, and the cache for one sequence, exactly as plain generate leaves them). prompt_mask: [B, P] the prompts'
    attention mask (None: no padding)."""
    one = rows[0] if len(rows) == 1 else None
    pad_id = pad_token_tensor(gen)
    sequences = one.ids.clone() if one is not None else pad_rows(rows, gen.pad_token_id if pad_id is None else pad_id)
    if not gen.return_dict_in_generate:
        return sequences
    cache = run.cache if one is not None and strategy.returns_cache and gen.use_cache else None  # use_cache=False: none
    if cache is not None:
        crop(cache, one.ids.shape[1] - 1)  # plain decoding caches every token but the last
    if one is not None:
        scores = tuple(one.scores) if one.scores is not None else None
        logits = tuple(one.logits) if one.logits is not None else None
    else:
        scores, logits = batch_outputs(model, rows, sequences, prompt_mask, attention)
    return output_type(model)(
        sequences=sequences,
        scores=scores,
        logits=logits,
        **{CACHE_KWARG: cache},
        lookahead_stats=run.stats,
        row_stats=[row.stats for row in rows],
    )


def _row_processors(processors: LogitsProcessorList, index: int) -> LogitsProcessorList:
    """Processors called with one row's ids [1, S]: per-batch state is cut to that row (generate gives the
    repetition penalty each row's padding length, to skip the padding)."""
    return LogitsProcessorList(repetition_penalty_for_row(proc, index) for proc in processors)
