"""Plain beam search, one step at a time: the state transformers' `_beam_search` keeps between forwards, advanced by
transformers' own step functions (lade.compat.PlainBeamSteps) from the next-token logits of every running beam.

A step is a pure function of that state and those logits, with the logits processors and the stopping criteria
called on exactly the arguments plain beam search calls them with; so whoever computes the logits (one forward per
step, or a lookahead step that computed several steps' logits at once), the sequence of states is plain beam
search's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .compat import PlainBeamSteps, eos_token_tensor, pad_token_tensor


@dataclass
class BeamSearch:
    """The running and finished beams of B prompts with k beams each (N = B * k rows); names as in `_beam_search`."""

    steps: PlainBeamSteps
    processors: LogitsProcessorList
    stopping_criteria: StoppingCriteriaList
    batch: int  # B
    beams: int  # k
    prompt_length: int  # decoder_prompt_len
    cur_len: int
    max_length: int
    beams_to_keep: int
    top_num_beam_mask: torch.Tensor  # [beams_to_keep] bool
    early_stopping: bool | str
    length_penalty: float
    running_sequences: torch.Tensor  # [B, k, max_length]
    running_beam_scores: torch.Tensor  # [B, k]
    running_beam_indices: torch.Tensor  # [B, k, max_length - prompt_length]
    sequences: torch.Tensor  # [B, k, max_length] finished hypotheses
    beam_scores: torch.Tensor  # [B, k]
    beam_indices: torch.Tensor  # [B, k, max_length - prompt_length]
    is_sent_finished: torch.Tensor  # [B, k] bool
    is_early_stop_heuristic_unsatisfied: torch.Tensor  # [B, 1] bool
    next_token_hits_stopping_criteria: torch.Tensor  # [B, k] bool
    scores: tuple | None  # processed log-probabilities [N, V] per step, when kept
    logits: tuple | None  # raw logits [N, V] per step, when kept
    done: bool = False

    @classmethod
    def start(cls, model, input_ids: torch.Tensor, gen: GenerationConfig, processors: LogitsProcessorList,
              stopping_criteria: StoppingCriteriaList) -> "BeamSearch":
        """input_ids: [N, P], each prompt repeated k times (as generate expands them for beam search)."""
        steps = PlainBeamSteps(model)
        k, device = gen.num_beams, input_ids.device
        batch, cur_len = input_ids.shape[0] // k, input_ids.shape[1]
        pad_token_id, eos_token_id = pad_token_tensor(gen), eos_token_tensor(gen)
        n_eos_tokens = eos_token_id.shape[0] if eos_token_id is not None else 0
        beams_to_keep = max(2, 1 + n_eos_tokens) * k
        top_num_beam_mask = torch.cat((torch.ones(k, dtype=torch.bool), torch.zeros(beams_to_keep - k, dtype=torch.bool)
                                       )).to(device)  # [beams_to_keep]
        fill = pad_token_id or eos_token_id[0] if eos_token_id is not None else -1  # plain's fill value, as written
        running = torch.full((batch, k, gen.max_length), fill_value=fill, dtype=torch.int64, device=device)
        running[:, :, :cur_len] = steps.unflatten_beam_dim(input_ids, batch, k)
        running_scores = torch.zeros((batch, k), dtype=torch.float, device=device)  # [B, k]
        running_scores[:, 1:] = -1e9  # only the first beam's continuations count at the first step
        indices = torch.full((batch, k, gen.max_length - cur_len), fill_value=-1, dtype=torch.int32, device=device)
        keep = bool(gen.return_dict_in_generate)
        return cls(
            steps, processors, stopping_criteria, batch, k, cur_len, cur_len, gen.max_length, beams_to_keep,
            top_num_beam_mask, gen.early_stopping, gen.length_penalty, running, running_scores, indices,
            running.detach().clone(), torch.full((batch, k), fill_value=-1e9, dtype=torch.float, device=device),
            indices.detach().clone(), torch.zeros((batch, k), dtype=torch.bool, device=device),
            torch.ones((batch, 1), dtype=torch.bool, device=device),
            torch.zeros((batch, k), dtype=torch.bool, device=device),
            () if keep and gen.output_scores else None, () if keep and gen.output_logits else None,
        )

    def running(self) -> torch.Tensor:
        """[N, cur_len] every running beam's sequence (its left padding included)."""
        return self.steps.flatten_beam_dim(self.running_sequences[:, :, : self.cur_len])

    def advance(self, logits: torch.Tensor) -> list[int]:
        """One plain beam search step from logits [N, V] (float32, the next-token logits of every running beam) ->
        for each new running beam, the row of the running beam it extends (its last token is the step's new one)."""
        s = self.steps
        batch, k, cur_len, prompt_length = self.batch, self.beams, self.cur_len, self.prompt_length
        log_probs = torch.nn.functional.log_softmax(logits, dim=-1)  # [N, V]
        log_probs = self.processors(self.running(), log_probs)
        if self.logits is not None:
            self.logits += (logits.clone(),)
        if self.scores is not None:
            self.scores += (log_probs.clone(),)
        log_probs = s.unflatten_beam_dim(log_probs, batch, k) + self.running_beam_scores[:, :, None]  # [B, k, V]
        log_probs = torch.reshape(log_probs, (batch, -1))  # [B, k * V]

        topk_log_probs, topk_running_sequences, topk_running_beam_indices = s.get_top_k_continuations(
            accumulated_log_probs=log_probs, running_sequences=self.running_sequences,
            running_beam_indices=self.running_beam_indices, cur_len=cur_len, decoder_prompt_len=prompt_length,
            do_sample=False, beams_to_keep=self.beams_to_keep, num_beams=k, batch_size=batch)
        hits = self.stopping_criteria(s.flatten_beam_dim(topk_running_sequences[:, :, : cur_len + 1]), self.scores)
        self.next_token_hits_stopping_criteria = s.unflatten_beam_dim(hits, batch, self.beams_to_keep)
        self.running_sequences, self.running_beam_scores, self.running_beam_indices = \
            s.get_running_beams_for_next_iteration(
                topk_log_probs=topk_log_probs, topk_running_sequences=topk_running_sequences,
                topk_running_beam_indices=topk_running_beam_indices,
                next_token_hits_stopping_criteria=self.next_token_hits_stopping_criteria, num_beams=k)
        self.sequences, self.beam_scores, self.beam_indices, self.is_sent_finished = s.update_finished_beams(
            sequences=self.sequences, topk_running_sequences=topk_running_sequences, beam_scores=self.beam_scores,
            topk_log_probs=topk_log_probs, beam_indices=self.beam_indices,
            topk_running_beam_indices=topk_running_beam_indices,
            is_early_stop_heuristic_unsatisfied=self.is_early_stop_heuristic_unsatisfied,
            is_sent_finished=self.is_sent_finished,
            next_token_hits_stopping_criteria=self.next_token_hits_stopping_criteria,
            top_num_beam_mask=self.top_num_beam_mask, num_beams=k, cur_len=cur_len,
            decoder_prompt_len=prompt_length, length_penalty=self.length_penalty, early_stopping=self.early_stopping)
        parents = s.flatten_beam_dim(self.running_beam_indices[..., cur_len - prompt_length])  # [N]

        self.cur_len = cur_len + 1
        self.is_early_stop_heuristic_unsatisfied = s.check_early_stop_heuristic(
            is_early_stop_heuristic_unsatisfied=self.is_early_stop_heuristic_unsatisfied,
            running_beam_scores=self.running_beam_scores, beam_scores=self.beam_scores,
            is_sent_finished=self.is_sent_finished, cur_len=self.cur_len, max_length=self.max_length,
            decoder_prompt_len=prompt_length, early_stopping=self.early_stopping, length_penalty=self.length_penalty)
        self.done = not bool(s.beam_search_has_unfinished_sequences(
            self.is_early_stop_heuristic_unsatisfied, self.is_sent_finished, self.next_token_hits_stopping_criteria,
            self.early_stopping))
        return parents.tolist()

    def result(self, num_return_sequences: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (sequences [B * R, L], sequences_scores [B * R], beam_indices [B * R, L - P]) of the R best finished
        hypotheses per prompt, cut to the longest generated length, as plain beam search returns them."""
        s, r = self.steps, num_return_sequences
        sequences = s.flatten_beam_dim(self.sequences[:, :r, :])
        beam_scores = s.flatten_beam_dim(self.beam_scores[:, :r])
        beam_indices = s.flatten_beam_dim(self.beam_indices[:, :r, :])
        generated = ((beam_indices + 1).bool()).sum(dim=1).max()
        return sequences[:, : self.prompt_length + generated], beam_scores, beam_indices[:, :generated]
