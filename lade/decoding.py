"""lade as a transformers `custom_generate` callable: checks, rows, the loop (lade/loop.py), the output.

`lookahead_generate` decodes in one process; lade.distributed runs the same function with its own strategy
(`lookahead_strategy=`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
from transformers import GenerationConfig
from transformers.cache_utils import Cache
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .auto import auto_task, resolve_config
from .batch_scores import batch_outputs
from .beams import beam_config, beam_generate, logits_width
from .cache import crop, new_cache, self_attention_cache, slotted
from .checks import check_corpus, check_corpus_draft, check_generation
from .compat import CACHE_KWARG, generate_call_arguments, pad_token_tensor, repetition_penalty_for_row
from .config import LookaheadConfig
from .corpus import Corpus
from .cost import HOST_S, latency_profile
from .drafters import RowContext, make_drafter
from .drafters.allocation import StepSizer
from .drafters.step_cost import StepCost
from .encoder_decoder import EncoderDecoderCall
from .handover import drafts_can_pay, learned_rows, plain_generate, rows_latency
from .loop import Run, decode
from .model_call import ModelCall
from .outputs import LookaheadDecoderOnlyOutput, LookaheadEncoderDecoderOutput
from .rope import Positions, frequencies_kept
from .rows import Row, pad_rows
from .sampling import TokenChooser
from .strategy import LocalStrategy, Strategy


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
    model (q -> seconds of a q-token step, e.g. a lade.cost.LatencyProfile) that "auto" and adaptive drafts use;
    None measures this model's profile once (cached). lookahead_model_call: the class of a decoder-only model's call
    (a ModelCall subclass, e.g. one that compiles or replays forwards); None: ModelCall. corpus: a lade.Corpus of
    earlier requests the drafts also come from (lade/corpus.py), which learns every row's prompt and output at the
    end of the call.
    """
    gen, processors = generation_config, logits_processor
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

    # 1. every refusal (no forward, no streamer call), then the configuration ("auto" may time the model, keeping the
    # RoPE state plain decoding would start from)
    check_corpus(corpus, logits_width(model), model.config.model_type, lookahead_strategy is not None)
    with frequencies_kept(model):
        pads, config = strategy.setup(
            lambda: check_generation(model, input_ids, gen, processors, stopping_criteria, model_kwargs, cache,
                                     bool(synced_gpus or caller.get("synced_gpus")), streamer,
                                     caller.get("assistant_model")),
            lambda: beam_config(lookahead_config, gen, model) if beams else
            resolve_config(lookahead_config, gen, model, adaptive=strategy.adaptive_drafts, latency=lookahead_latency,
                           allowed=strategy.accepts),
        )
        requested = lookahead_config if lookahead_config is not None else getattr(gen, "lookahead_config", None)
        n, task = input_ids.shape[0], auto_task(requested)  # rows per step: B, or B * k beams
        multi = functools.cache(lambda: rows_latency(model, n, lookahead_latency))  # [n, q] steps, loaded once
        latency = _drafting_latency(model, config, requested, lookahead_latency, multi if beams else None)
        plain = task is not None and lookahead_strategy is None and n > 1 and not beams and \
            not drafts_can_pay(multi(), n, task)
    check_corpus_draft(corpus, config)
    if plain:  # "auto" with several rows per step where no draft pays: transformers' own loop (lade/handover.py)
        if streamer is not None and not prompt_streamed:
            streamer.put(input_ids.cpu())
        out = plain_generate(model, input_ids, processors, stopping_criteria, gen,
                             bool(synced_gpus or caller.get("synced_gpus")), streamer, model_kwargs)
        for tokens, pad in zip(learned_rows(out, input_ids.shape[1], pads, gen), pads) if corpus is not None else ():
            corpus.add(tokens, prompt_length=input_ids.shape[1] - pad)
        return out
    if corpus is not None:
        corpus.bind(logits_width(model), model.config.model_type)

    if beams:  # beam search: its own steps over the same model call (lade/beams.py)
        call = _model_call(model, cache, model_kwargs, config.attention, lookahead_model_call or ModelCall)
        return beam_generate(model, call, input_ids, pads, config, gen, processors, stopping_criteria,
                             model_kwargs.get("attention_mask"), lookahead_source_ids, latency)

    # 2. the rows and what every step shares
    source = lookahead_source_ids[0] if lookahead_source_ids is not None else None
    rows = _rows(model, input_ids, pads, config, gen, processors, strategy, source, latency, corpus)
    call = _model_call(model, cache, model_kwargs, config.attention, lookahead_model_call or ModelCall)
    run = _run(call, model, config, gen, stopping_criteria, streamer, strategy, input_ids.device,
               _sizer(config, latency, multi, rows))
    if streamer is not None and not prompt_streamed:
        streamer.put(input_ids.cpu())

    # 3. the loop
    start = time.perf_counter()
    with strategy.guard(), slotted(cache):
        decode(run, rows, input_ids, model_kwargs.get("attention_mask") if any(pads) else None,
               self_attention_cache(cache).get_seq_length())
    strategy.finish()
    run.stats.total_time_s = time.perf_counter() - start
    for row in rows if corpus is not None else ():
        corpus.add(row.tokens.tolist(), prompt_length=input_ids.shape[1] - row.pad)
    if streamer is not None:
        streamer.end()
    return _output(model, rows, gen, run, strategy, model_kwargs.get("attention_mask") if any(pads) else None,
                   config.attention)


def _streamer(caller: dict, streamer, lookahead_streamer) -> tuple[object | None, bool]:
    """-> (the one streamer, whether transformers put the prompt into it already)."""
    prompt_streamed = caller.get("streamer") is not None
    if prompt_streamed and lookahead_streamer is not None:
        raise ValueError("pass one streamer: streamer= or lookahead_streamer=, not both")
    return lookahead_streamer or caller.get("streamer") or streamer, prompt_streamed


def _drafting_latency(model, config: LookaheadConfig, requested, latency: Callable[[float], float] | None,
                      beam_rows: Callable[[], Callable[[float], float]] | None = None
                      ) -> Callable[[float], float] | None:
    """The latency model adaptive drafts plan with: the one passed in, else the model's measured profile. "auto"
    beam search (beam_rows: the latency model of steps of all its B * k rows, `rows_latency`) prices its steps with
    beam_rows()."""
    if latency is not None and not config.adaptive and not isinstance(requested, str):
        raise ValueError("lookahead_latency is used by lookahead_config='auto' and by adaptive drafts "
                         f"(adaptive=True); {config.label!r} is neither: drop lookahead_latency")
    if beam_rows is not None:  # "auto" beam search prices every step (lade/beams.py); fixed configs draft as configured
        return beam_rows() if isinstance(requested, str) else None
    if not (config.adaptive and config.enabled):
        return None
    return latency if latency is not None else latency_profile(model)


def _sizer(config: LookaheadConfig, latency: Callable[[float], float] | None,
           batch_rows: Callable[[], Callable[[float], float]], rows: list[Row]) -> StepSizer | None:
    """Adaptive drafters that rank their nodes (`offer`, `rest`) are sized together, for the whole batch's step; None
    where drafts are not adaptive or a drafter plans its own steps. A batch's step of q tokens in all is priced as a
    step of its B rows feeding q / B tokens each (batch_rows(): the latency model of B-row steps, `rows_latency`)."""
    if latency is None or not all(hasattr(row.drafter, "offer") and hasattr(row.drafter, "rest") for row in rows):
        return None
    if len(rows) > 1:
        latency = _over_rows(batch_rows(), len(rows))
    return StepSizer(StepCost(latency, HOST_S), getattr(config.draft_options, "correct_latency", True))


def _over_rows(per_row: Callable[[float], float], count: int) -> Callable[[float], float]:
    """q tokens over all `count` rows of a step -> seconds, from `per_row` (tokens per row -> seconds)."""
    return lambda q: per_row(q / count)


def _rows(model, input_ids: torch.Tensor, pads: list[int], config: LookaheadConfig, gen: GenerationConfig,
          processors: LogitsProcessorList, strategy: Strategy, source: torch.Tensor | None,
          latency: Callable[[float], float] | None, corpus: Corpus | None) -> list[Row]:
    """One Row per sequence of input_ids [B, P], each with its own drafter and view of the processors."""
    keep_scores = bool(gen.return_dict_in_generate and gen.output_scores)
    keep_logits = bool(gen.return_dict_in_generate and gen.output_logits)
    vocab = logits_width(model)
    return [Row(b, pads[b], input_ids[b : b + 1].long(), input_ids.shape[1],  # long: what plain generate returns
                make_drafter(config, RowContext(input_ids[b, pads[b] :], source, vocab, latency, HOST_S, corpus)),
                _row_processors(processors, b), strategy.new_stats(), [] if keep_scores else None,
                [] if keep_logits else None)
            for b in range(input_ids.shape[0])]


def _run(call: ModelCall, model, config: LookaheadConfig, gen: GenerationConfig,
         stopping_criteria: StoppingCriteriaList, streamer, strategy: Strategy, device: torch.device,
         sizer: StepSizer | None) -> Run:
    """What every step shares: the model call, how tokens are chosen, stopping, streaming, the batch's stats."""
    keep_scores = bool(gen.return_dict_in_generate and gen.output_scores)
    return Run(call, call.cache,
               TokenChooser.for_generation(bool(gen.do_sample), config, device), strategy, stopping_criteria,
               streamer, strategy.new_stats(), keep_scores, Positions.of(model), model.device, sizer)


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
    output_type = LookaheadEncoderDecoderOutput if model.config.is_encoder_decoder else LookaheadDecoderOnlyOutput
    return output_type(
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
