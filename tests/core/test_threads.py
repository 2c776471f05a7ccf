"""A model shared between threads: every caller gets exactly its single-threaded output, whatever runs beside it.

lade's attention paths and encoder-decoder position adapters change what the model reads during lade's own forwards
through a context variable (lade.scoped), which is private to the thread that sets it. So plain generate in one
thread and lade in another (or two lade calls) cannot see each other's attention implementation or positions, and
each output must equal the one the same call gives alone. The threads start together at a barrier, repeat their
call, and the interpreter switches threads every few microseconds, so their forwards interleave layer by layer.
"""

import copy
import pickle
import sys
import threading

import pytest
import torch

import lade
from lade import scoped
from tiny_models import random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

GREEDY = dict(do_sample=False, max_new_tokens=16, eos_token_id=None)
REPEATS = 3


def _config(attention: str = "auto") -> lade.LookaheadConfig:
    return lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, attention=attention)


def _padded_batch(count: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """[count, L] left-padded prompts of different lengths and their attention mask: plain generate's padding mask
    is where a wrong attention function shows (the bug this file guards against broke 11 of 12 such rows)."""
    prompts = [random_prompt(50 + i, length=10 + 3 * i, repeat=i % 2 == 0)[0] for i in range(count)]
    width = max(len(p) for p in prompts)
    ids = torch.zeros(count, width, dtype=torch.long)
    mask = torch.zeros(count, width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):], mask[row, width - len(prompt):] = prompt, 1
    return ids, mask


def _concurrently(jobs: dict) -> dict:
    """Run each job (name -> callable) REPEATS times in its own thread, all starting at once -> name -> outputs.
    An exception in any thread fails the test with that exception."""
    barrier = threading.Barrier(len(jobs))
    results: dict = {name: [] for name in jobs}
    errors: list = []

    def run(name, job):
        try:
            barrier.wait()
            for _ in range(REPEATS):
                results[name].append(job())
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
            barrier.abort()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: their forwards interleave
    try:
        threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
    return results


def _assert_each_equals_its_oracle(jobs: dict) -> None:
    """Each job's output alone, then REPEATS outputs of it beside the others: all equal."""
    oracle = {name: job() for name, job in jobs.items()}
    for name, outputs in _concurrently(jobs).items():
        for i, out in enumerate(outputs):
            assert torch.equal(out, oracle[name]), f"{name}, repetition {i}: differs from its single-threaded output"


def _state(model) -> tuple:
    """What a user can observe of a model: its attention implementation, config file, repr and instance attributes."""
    return (model.config._attn_implementation, model.config.to_json_string(), repr(model),
            [sorted(vars(module)) for module in model.modules()])


@pytest.mark.parametrize("attention", ["mask", "split", "flex"])
def test_plain_generate_beside_lade_on_every_path(attention):
    """Plain generate on a padded batch reads the model's own sdpa attention while lade, in another thread, runs its
    steps under lade_sdpa / lade_split / lade_flex: both equal their single-threaded outputs, and afterwards the model
    reads and prints as before (the override lived in lade's thread, for its forwards only)."""
    model = tiny_model("llama", "sdpa")  # 4 query heads over 2 key/value heads: lade_sdpa's grouped branch
    before = _state(model)
    ids, mask = _padded_batch()
    prompt = random_prompt(7, length=30)
    _assert_each_equals_its_oracle({
        "plain": lambda: model.generate(ids, attention_mask=mask, **GREEDY),
        "lade": lambda: lade.generate(model, prompt, _config(attention), **GREEDY),
    })
    assert _state(model) == before


def test_two_lade_calls_on_different_paths_at_once():
    """Three lade calls on one model at once, each under its own attention function (split, flex, and the mask path
    with a padded batch): each thread's model reads only its own call's implementation."""
    model = tiny_model("qwen2", "sdpa")
    before = _state(model)
    ids, mask = _padded_batch(4)
    _assert_each_equals_its_oracle({
        "split": lambda: lade.generate(model, random_prompt(1, length=28), _config("split"), **GREEDY),
        "flex": lambda: lade.generate(model, random_prompt(2, length=20), _config("flex"), **GREEDY),
        "mask": lambda: lade.generate(model, ids, _config("mask"), attention_mask=mask, **GREEDY),
    })
    assert _state(model) == before
    plain = model.generate(ids, attention_mask=mask, **GREEDY)
    assert torch.equal(plain, tiny_model("qwen2", "sdpa").generate(ids, attention_mask=mask, **GREEDY))


def test_lade_during_a_compile_in_another_thread():
    """torch.compile in another thread (a user's model, or eager flex_attention, which compiles at each call) raises
    torch's process-wide is_compiling flag for the whole compile. lade's overrides stand aside only while their own
    thread is tracing, so a split decode run while the other thread compiles still equals its output alone (reading
    the process-wide flag, it ran the model's own sdpa on the step's layout and failed)."""
    model = tiny_model("llama", "sdpa")
    prompt = random_prompt(7, length=30)
    alone = lade.generate(model, prompt, _config("split"), **GREEDY)
    compiling, finish = threading.Event(), threading.Event()

    def backend(graph, example_inputs):  # called inside the other thread's compile session
        compiling.set()
        finish.wait(timeout=120)
        return graph.forward

    thread = threading.Thread(target=lambda: torch.compile(lambda x: x.sin() + 1, backend=backend)(torch.zeros(2)))
    thread.start()
    try:
        assert compiling.wait(timeout=120)
        assert torch.compiler.is_compiling()  # what this thread reads meanwhile: the other thread's flag
        beside = lade.generate(model, prompt, _config("split"), **GREEDY)
    finally:
        finish.set()
        thread.join()
    assert torch.equal(beside, alone)


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_encoder_decoder_plain_beside_two_lade_calls(family):
    """BART's position table and T5's relative-position bucketing read lade's logical positions only in lade's
    thread: plain generate beside two lade calls on different sources keeps the positions it computes itself, and
    each lade call keeps its own step's positions."""
    model = tiny_seq2seq(family, "sdpa")
    before = _state(model)
    sources = [random_prompt(60 + i, length=14 + 4 * i) for i in range(3)]
    _assert_each_equals_its_oracle({
        "plain": lambda: model.generate(sources[0], attention_mask=torch.ones_like(sources[0]), **GREEDY),
        "lade 1": lambda: lade.generate(model, sources[1], _config(), **GREEDY),
        "lade 2": lambda: lade.generate(model, sources[2], _config(), **GREEDY),
    })
    assert _state(model) == before


class _Box:
    @property
    def value(self) -> str:
        return "own"

    def method(self) -> str:
        return "own method"


def test_override_is_seen_only_by_its_thread_and_block():
    """The override lives in a context variable: another thread reads the original meanwhile, another object of the
    class is untouched, and the block's end (also by an exception) restores the original."""
    box, other = _Box(), _Box()
    seen = []
    with scoped.overriding([(box, "value", "lade"), (box, "method", lambda: "lade method")]):
        assert (box.value, box.method(), other.value) == ("lade", "lade method", "own")
        thread = threading.Thread(target=lambda: seen.append((box.value, box.method())))
        thread.start()
        thread.join()
    assert seen == [("own", "own method")]
    with pytest.raises(KeyError), scoped.overriding([(box, "value", "lade")]):
        raise KeyError("inside")
    assert (box.value, box.method()) == ("own", "own method")


def test_classes_are_wrapped_once_whichever_thread_is_first():
    """Eight threads overriding objects of a fresh class at once install one wrapper per attribute (a wrapper around
    a wrapper would still work, but the install is meant to be idempotent), and each thread reads its own value."""

    class Fresh:  # a class no test has overridden yet
        value = property(lambda self: "own")

        def method(self) -> str:
            return "own method"

    barrier, seen = threading.Barrier(8), {}

    def run(i):
        box = Fresh()
        barrier.wait()
        with scoped.overriding([(box, "value", f"thread {i}"), (box, "method", lambda: i)]):
            seen[i] = (box.value, box.method())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {i: (f"thread {i}", i) for i in range(8)}
    assert not isinstance(Fresh.__dict__["value"].original, scoped._Scoped)
    assert not getattr(Fresh.__dict__["method"].__wrapped__, "__lade_scoped__", False)
    assert (Fresh().value, Fresh().method()) == ("own", "own method")


def test_an_instance_attribute_that_hides_the_override_is_an_error():
    """A hook that set `forward` on an instance would bypass the class-level override: refused, not ignored."""
    box = _Box()
    box.method = lambda: "hook"
    with pytest.raises(RuntimeError, match="hides"), scoped.overriding([(box, "method", lambda: "lade")]):
        pass


def test_model_after_lade_copies_pickles_and_saves_as_before(tmp_path):
    """Nothing is stored on the model or its config: after lade ran, the config's class, pickled bytes and saved
    file are those of a model lade never saw, and a deep copy decodes like the original."""
    model, untouched = tiny_model("llama", "sdpa"), tiny_model("llama", "sdpa")
    prompt = random_prompt(3, length=24)
    lade.generate(model, prompt, _config("split"), **GREEDY)
    assert type(model.config) is type(untouched.config)
    assert pickle.dumps(model.config) == pickle.dumps(untouched.config)
    model.config.save_pretrained(tmp_path / "a")
    untouched.config.save_pretrained(tmp_path / "b")
    assert (tmp_path / "a" / "config.json").read_text() == (tmp_path / "b" / "config.json").read_text()
    twin = copy.deepcopy(model)
    assert torch.equal(lade.generate(twin, prompt, _config("split"), **GREEDY),
                       untouched.generate(prompt, attention_mask=torch.ones_like(prompt), **GREEDY))


def test_model_after_lade_still_compiles_in_one_graph():
    """The wrappers lade leaves on the classes (BART's config property, read by its sdpa layers, and its position
    table's forward) defer to the original code under torch.compile tracing, so a model lade has run still traces in
    one graph (fullgraph=True) and computes the same logits."""
    prompt = random_prompt(4, length=12)
    model = tiny_seq2seq("bart", "sdpa")
    lade.generate(model, prompt, _config(), **GREEDY)
    inputs = dict(input_ids=prompt, decoder_input_ids=torch.tensor([[1, 5, 6]]))
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(**inputs).logits, model(**inputs).logits)
