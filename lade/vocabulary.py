"""Where a model keeps its text sizes: the vocabulary its input ids index, the width of its logits, the positions it
can place. A composite model (vision or audio plus text) keeps them in its text config, not its top-level one."""

from __future__ import annotations

import torch

POSITION_TABLE_FIELDS = ("max_position_embeddings", "n_positions", "block_size")  # a learned or sinusoidal table


def text_config(model):
    """The config of the model's text decoder (the model's own config for a text-only model)."""
    return model.config.get_text_config(decoder=True)


def input_vocab(model) -> int:
    """How many token ids the model's input embedding takes (the text config's vocab_size where the embedding is not
    a plain table, e.g. a module of several tables, or the model names none)."""
    try:
        embedding = model.get_input_embeddings()
    except NotImplementedError:  # models that embed several codebooks (Dia) name no input embedding
        embedding = None
    if isinstance(embedding, torch.nn.Embedding):
        return embedding.num_embeddings
    return text_config(model).vocab_size


def logits_width(model) -> int:
    """The vocabulary size of the model's logits: its output head's width (a linear head's out_features, a tied
    embedding's rows), else the text config's vocab_size."""
    try:
        head = model.get_output_embeddings()
    except NotImplementedError:
        head = None
    if isinstance(head, torch.nn.Linear):
        return head.out_features
    if isinstance(head, torch.nn.Embedding):  # a head that shares the embedding module (FSMT)
        return head.num_embeddings
    return text_config(model).vocab_size


def position_limit(model) -> int | None:
    """Logical positions a model can place: the size of a learned or sinusoidal position table (GPT-2, OPT, BART,
    Marian, Bark's block_size, ...), None for rotary, relative-bias or other models without such a table."""
    config = text_config(model)
    if getattr(config, "rope_parameters", None) or getattr(config, "rotary_dim", None):
        return None
    for name in POSITION_TABLE_FIELDS:
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    return None
