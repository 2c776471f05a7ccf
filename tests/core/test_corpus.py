"""lade.Corpus (lade/corpus.py): a corpus of earlier requests drafting for later ones. Drafts never change what is
generated (greedy: plain greedy token for token; sampling: the same keyed draws), so every decoding check compares
with plain generate; the corpus itself is checked against brute force (its index after eviction, its shares), on
disk (round trip, damaged files) and shared by threads."""

import json
import random
import threading
from pathlib import Path

import pytest
import torch

import lade
from lade.checks import check_corpus
from lade.corpus import KEY_LENGTHS, MAX_MATCH, MEASURED_DEPTH, SCAN
from lade.drafters.kinds import CORPUS_PRIOR_WEIGHT, prior_rates
from tiny_models import random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

REPO = Path(__file__).resolve().parents[2]
GREEDY = dict(do_sample=False, max_new_tokens=32, eos_token_id=None)
STEEP = lambda q: 1.0 + 0.01 * q  # noqa: E731 - a latency model: extra tokens are cheap, so auto drafts
CONFIGS = {
    "retrieval": lade.LookaheadConfig(draft="retrieval", step_budget=12),
    "merged": lade.LookaheadConfig(draft="merged", step_budget=16, window_size=3, ngram_size=3, guess_set_size=3),
    "corpus": lade.LookaheadConfig(draft="corpus", step_budget=16, adaptive=True,
                                   draft_options=dict(correct_latency=False)),  # plans with STEEP alone
    "auto": "auto",
}


def plain(model, ids, **kw):
    return model.generate(ids, attention_mask=torch.ones_like(ids), **{**GREEDY, **kw})


def run(model, ids, config, corpus, **kw):
    """lade.generate with the corpus -> (output, stats); "auto" plans with the injected STEEP latency model."""
    latency = dict(lookahead_latency=STEEP) if config == "auto" or getattr(config, "adaptive", False) else {}
    return lade.generate(model, ids, config, corpus=corpus, return_stats=True, **latency, **{**GREEDY, **kw})


def filled(model, count: int = 4, **corpus_kw) -> lade.Corpus:
    """A corpus that learned `count` greedy calls of prompts 100.. (never the ones the tests measure)."""
    corpus = lade.Corpus(**corpus_kw)
    for i in range(count):
        run(model, random_prompt(100 + i, length=16), CONFIGS["retrieval"], corpus)
    return corpus


@pytest.mark.parametrize("name", CONFIGS)
def test_drafts_from_a_filled_corpus_are_exact(name):
    """Drafts only change how many tokens a step accepts: with a corpus of earlier calls (which include the measured
    prompts' own earlier outputs after the first round), every output equals plain greedy."""
    model = tiny_model("llama")
    corpus = filled(model)
    for round_ in range(2):
        for i in range(3):
            ids = random_prompt(i, length=12 + 8 * i, repeat=i % 2 == 0)
            out, _ = run(model, ids, CONFIGS[name], corpus)
            assert torch.equal(out, plain(model, ids)), f"round {round_}, prompt {i}"


@pytest.mark.parametrize("name", CONFIGS)
def test_a_repeated_request_is_drafted_from_the_corpus(name):
    """The second identical call finds its whole output in the corpus (the first call's prompt and output, stored at
    its end), so it accepts many tokens per step where the first could not."""
    model = tiny_model("llama")
    corpus = lade.Corpus()
    ids = random_prompt(7, length=20, repeat=False)
    first, first_stats = run(model, ids, CONFIGS[name], corpus)
    second, second_stats = run(model, ids, CONFIGS[name], corpus)
    assert torch.equal(first, second) and torch.equal(first, plain(model, ids))
    # a third fewer steps at least: how many depends on the merged drafter's plan (its measured acceptance prior),
    # the copying itself on the longest step
    assert second_stats.steps * 3 <= first_stats.steps * 2
    assert max(second_stats.accepted_per_step) > max(first_stats.accepted_per_step)  # long steps copied from it
    assert max(second_stats.accepted_per_step) >= 8


def test_model_generate_and_the_custom_generate_folder_take_the_corpus():
    """corpus= is a keyword of model.generate with lade's callable or this repository's custom_generate folder."""
    model = tiny_model("qwen2")
    corpus = lade.Corpus()
    ids = random_prompt(3)
    kw = dict(attention_mask=torch.ones_like(ids), lookahead_config=CONFIGS["retrieval"], **GREEDY)
    out = model.generate(ids, custom_generate=lade.lookahead_generate, corpus=corpus, **kw)
    assert torch.equal(out, plain(model, ids)) and corpus.requests == 1
    out = model.generate(ids, custom_generate=str(REPO), trust_remote_code=True, corpus=corpus, **kw)
    assert torch.equal(out, plain(model, ids)) and corpus.requests == 2


def slow_continuations(requests, tail, count, length):
    """By definition: the longest n in KEY_LENGTHS whose n-gram ends `tail` somewhere with a continuation, its SCAN
    latest occurrences; each continuation's best backward match; shares from counts of continuation prefixes."""
    for n in KEY_LENGTHS:
        if n > len(tail):
            continue
        hits = [(r, end) for r, tokens in enumerate(requests) for end in range(n - 1, len(tokens))
                if tokens[end - n + 1 : end + 1] == list(tail[-n:])][-SCAN:]
        if not hits:
            continue
        continuations = []
        for recency, (r, end) in enumerate(reversed(hits)):
            tokens = requests[r]
            match = n
            while match < min(MAX_MATCH, end + 1, len(tail)) and tokens[end - match] == tail[-match - 1]:
                match += 1
            if end + 1 < len(tokens):
                continuations.append((tuple(tokens[end + 1 : end + 1 + length]), match, recency))
        distinct = {}
        for c, match, recency in continuations:
            seen = distinct.setdefault(c, [0, 0, recency])
            seen[0], seen[1] = seen[0] + 1, max(seen[1], match)
        best = sorted(distinct, key=lambda c: (-distinct[c][1], -distinct[c][0], distinct[c][2]))[:count]
        found = [x for x, _, _ in continuations]
        return [(c, distinct[c][1], tuple(share(found, c, d) for d in range(len(c)))) for c in best]
    return []


def share(found, c, d):
    """Of the continuations sharing c's first d tokens, the share continuing with c[d]."""
    return sum(x[: d + 1] == c[: d + 1] for x in found) / sum(x[:d] == c[:d] for x in found)


@pytest.mark.parametrize("seed", range(12))
def test_continuations_and_eviction_against_brute_force(seed):
    """Random requests over a small alphabet (many repeats) into a small corpus: after every add it holds exactly the
    newest requests that fit in max_tokens (a longer one: its last max_tokens tokens), and every query answers what
    a scan of those requests answers."""
    rng = random.Random(seed)
    alphabet = rng.choice([3, 6, 20])
    corpus = lade.Corpus(max_tokens=rng.choice([30, 80, 400]))
    kept: list[list[int]] = []
    for _ in range(12):
        request = [rng.randrange(alphabet) for _ in range(rng.randint(0, 50))]
        corpus.add(request)
        if request:
            kept.append(request[-corpus.max_tokens :])
        while sum(map(len, kept)) > corpus.max_tokens:
            kept.pop(0)
        assert len(corpus) == sum(map(len, kept)) <= corpus.max_tokens and corpus.requests == len(kept)
        for _ in range(4):
            tail = [rng.randrange(alphabet) for _ in range(rng.randint(1, 12))]
            count, length = rng.randint(1, 5), rng.randint(1, 8)
            assert corpus.continuations(tail, count, length) == slow_continuations(kept, tail, count, length)


def test_eviction_bound_in_decoding():
    """Every call stores its prompt and output (20 + 32 tokens); a corpus bounded at 120 tokens keeps the two newest
    calls and forgets the first prompt, whose repeat then drafts nothing from the corpus."""
    model = tiny_model("llama")
    corpus = lade.Corpus(max_tokens=120)
    ids = [random_prompt(20 + i, length=20, repeat=False) for i in range(3)]
    first, _ = run(model, ids[0], CONFIGS["corpus"], corpus)
    for i in (1, 2):
        run(model, ids[i], CONFIGS["corpus"], corpus)
    assert len(corpus) == 104 and corpus.requests == 2
    assert corpus.continuations(first[0, :20].tolist(), 4, 8) == []


def slow_acceptance(requests: list[tuple[list[int], int]]) -> dict:
    """The corpus's counts of its own drafts by their definition: before each request is stored, at each output
    position, every distinct drafted node (a prefix of a continuation `leads` returns) whose parent was right is
    tested, and accepted when it is the token that followed."""
    corpus, counts = lade.Corpus(), {}
    for tokens, prompt_length in requests:
        for last in range(prompt_length, len(tokens) - 1):
            nodes = {}
            for continuation, kinds in corpus.leads(tokens[: last + 1], MEASURED_DEPTH):
                for depth, kind in enumerate(kinds):
                    nodes.setdefault(continuation[: depth + 1], kind)
            for node, kind in nodes.items():
                following = tuple(tokens[last + 1 : last + 1 + len(node)])
                if len(following) == len(node) and following[:-1] == node[:-1]:
                    accepted, tested = counts.get(kind, (0, 0))
                    counts[kind] = (accepted + (following == node), tested + 1)
        corpus.add(tokens, prompt_length=len(tokens))  # stored without measuring it
    return counts


@pytest.mark.parametrize("seed", range(6))
def test_the_corpus_measures_its_own_drafts(seed):
    """Each request's output is drafted for by the corpus of the requests before it, and the counts per kind are what
    the definition gives (slow_acceptance); the prompt is not measured."""
    rng = random.Random(seed)
    alphabet = rng.choice([3, 5, 12])
    requests = []
    for _ in range(8):
        tokens = [rng.randrange(alphabet) for _ in range(rng.randint(2, 40))]
        requests.append((tokens, rng.randint(0, len(tokens) - 1)))
    corpus = lade.Corpus()
    for tokens, prompt_length in requests:
        corpus.add(tokens, prompt_length=prompt_length)
    assert corpus.acceptance() == slow_acceptance(requests) != {}


def test_a_call_starts_from_the_corpus_s_measured_acceptance():
    """The planning drafters start every call from the corpus's counts: a kind's prior moves from the heuristic
    (a retrieval match of the same length times the share) toward what the corpus measured."""
    model = tiny_model("llama")
    corpus = filled(model, count=3)
    counts = corpus.acceptance()
    assert counts and all(0 <= a <= t for a, t in counts.values())
    heuristic, learned = prior_rates(), prior_rates(counts)
    for kind, (accepted, tested) in counts.items():
        expected = (accepted + CORPUS_PRIOR_WEIGHT * heuristic[kind]) / (tested + CORPUS_PRIOR_WEIGHT)
        assert learned[kind] == pytest.approx(expected)
    assert {k: v for k, v in learned.items() if k not in counts} == {k: v for k, v in heuristic.items()
                                                                    if k not in counts}
    drafter = lade.drafters.make_drafter(CONFIGS["corpus"], lade.drafters.RowContext(
        random_prompt(0, length=8)[0], None, 64, STEEP, 0.0, corpus))
    kind = next(iter(counts))
    assert drafter.stats.prior_mean(kind) == pytest.approx(learned[kind])


def test_add_refuses_a_bad_prompt_length():
    with pytest.raises(ValueError, match="prompt_length must be a non-negative integer"):
        lade.Corpus().add([1, 2, 3], prompt_length=-1)


def test_save_and_load_round_trip(tmp_path):
    """A saved corpus loads with the same requests, bound, vocabulary and answers, and drafts as before."""
    model = tiny_model("llama")
    corpus = filled(model, count=2, max_tokens=500, vocabulary="tiny-char")
    ids = random_prompt(101, length=16)
    path = tmp_path / "corpus.json"
    corpus.save(path)
    loaded = lade.Corpus.load(path, vocabulary="tiny-char")
    assert (len(loaded), loaded.requests, loaded.max_tokens) == (len(corpus), corpus.requests, corpus.max_tokens)
    assert (loaded.vocab_size, loaded.model_type, loaded.vocabulary) == (corpus.vocab_size, "llama", "tiny-char")
    tail = ids[0].tolist()
    assert loaded.continuations(tail, 4, 8) == corpus.continuations(tail, 4, 8) != []
    assert loaded.acceptance() == corpus.acceptance() != {}
    out, stats = run(model, ids, CONFIGS["corpus"], loaded)
    assert torch.equal(out, plain(model, ids)) and stats.steps <= 4
    unbound = lade.Corpus(max_tokens=10)  # filled by hand, never bound to a model: no vocabulary to check ids against
    unbound.add([7, 8, 9])
    unbound.save(path)
    again = lade.Corpus.load(path)
    assert (len(again), again.vocab_size, again.continuations([8], 1, 2)) == (3, None, [((9,), 1, (1.0,))])


def test_a_damaged_or_foreign_file_is_refused(tmp_path):
    """Every way a file can differ from what save wrote is a ValueError naming the file, before any state is built."""
    corpus = lade.Corpus(vocabulary="v")
    corpus.bind(50, "llama")
    corpus.add([1, 2, 3, 4, 5])
    path = tmp_path / "corpus.json"
    corpus.save(path)
    text = path.read_text()
    body = json.loads(text)
    damaged = {
        "truncated": text[: len(text) // 2],
        "not json": "\x00\x01 garbage",
        "token changed": text.replace("[[1,2,3,4,5]]", "[[1,2,3,4,6]]"),
        "field dropped": json.dumps({k: v for k, v in body.items() if k != "max_tokens"}),
        "foreign format": json.dumps({**body, "format": "other"}),
        "counts changed": text.replace('"acceptance":[', '"acceptance":[[["corpus",1,1,0],5,1],'),
    }
    for why, content in damaged.items():
        path.write_text(content)
        with pytest.raises(ValueError, match="corpus.json"):
            lade.Corpus.load(path)
        assert why
    out_of_vocab = {**body, "requests": [[1, 2, 99]]}
    out_of_vocab["sha256"] = __import__("lade.corpus", fromlist=["_checksum"])._checksum(out_of_vocab)
    path.write_text(json.dumps(out_of_vocab))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        lade.Corpus.load(path)
    bad_counts = {**body, "acceptance": [[["corpus", 1, 1, 0], 5, 1]]}  # more accepted than tested
    bad_counts["sha256"] = __import__("lade.corpus", fromlist=["_checksum"])._checksum(bad_counts)
    path.write_text(json.dumps(bad_counts))
    with pytest.raises(ValueError, match="0 <= accepted <= tested"):
        lade.Corpus.load(path)
    version_1 = {k: v for k, v in body.items() if k != "acceptance"} | {"version": 1}  # before the counts: loads
    version_1["sha256"] = __import__("lade.corpus", fromlist=["_checksum"])._checksum(version_1)
    path.write_text(json.dumps(version_1))
    assert (len(lade.Corpus.load(path)), lade.Corpus.load(path).acceptance()) == (5, {})
    path.write_text(text)
    with pytest.raises(ValueError, match="vocabulary 'v', not 'w'"):
        lade.Corpus.load(path, vocabulary="w")


def test_a_corpus_of_another_vocabulary_is_refused_before_any_work():
    """Token ids mean nothing under another vocabulary: a corpus bound to one model refuses a model whose vocabulary
    size or type differs, and learns nothing from the refused call."""
    corpus = filled(tiny_model("llama"), count=1)
    stored = len(corpus)
    other = tiny_model("llama", vocab_size=64)
    with pytest.raises(ValueError, match="use a corpus per vocabulary"):
        run(other, random_prompt(1) % 64, CONFIGS["retrieval"], corpus)
    with pytest.raises(ValueError, match="use a corpus per vocabulary"):
        run(tiny_model("qwen2"), random_prompt(1), CONFIGS["retrieval"], corpus)
    assert len(corpus) == stored


def test_calls_that_cannot_use_a_corpus_refuse_it():
    """corpus= is never ignored: a drafter that does not draft from it, plain decoding, lookahead parallelism and a
    wrong object are refused with what to change; draft='corpus' without a corpus too."""
    model = tiny_model("llama")
    ids = random_prompt(2)
    corpus = lade.Corpus()
    for config, message in [(None, "draft='lookahead' cannot draft from a corpus"),
                            (lade.LookaheadConfig(window_size=4), "draft='lookahead' cannot"),
                            (lade.LookaheadConfig(enabled=False), "plain decoding")]:
        with pytest.raises(ValueError, match=message):
            lade.generate(model, ids, config, corpus=corpus, **GREEDY)
    with pytest.raises(ValueError, match="must be a lade.Corpus"):
        lade.generate(model, ids, CONFIGS["retrieval"], corpus=[1, 2], **GREEDY)
    with pytest.raises(ValueError, match="pass corpus=lade.Corpus"):
        lade.generate(model, ids, CONFIGS["corpus"], lookahead_latency=STEEP, **GREEDY)
    with pytest.raises(ValueError, match="lookahead parallelism"):
        check_corpus(corpus, 100, "llama", distributed=True)
    assert corpus.requests == 0 and corpus.vocab_size is None


def test_two_threads_share_one_corpus():
    """Two threads decode different prompts at once with one corpus, each call learning while the other drafts from
    it (the lock keeps the index whole): every output equals plain greedy, and the corpus holds every call."""
    model = tiny_model("llama")
    corpus = filled(model, count=2)
    prompts = [random_prompt(30 + i, length=14 + 6 * i) for i in range(2)]
    want = [plain(model, ids) for ids in prompts]
    barrier, errors, outputs = threading.Barrier(2), [], {0: [], 1: []}

    def job(i):
        try:
            barrier.wait()
            for _ in range(3):
                outputs[i].append(run(model, prompts[i], CONFIGS["merged"], corpus)[0])
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=job, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert all(torch.equal(out, want[i]) for i in range(2) for out in outputs[i])
    assert corpus.requests == 2 + 6


def test_sampling_with_a_corpus_draws_what_it_draws_without():
    """lade's sampling draws each position's token with noise keyed by sampling_seed and the position, whatever was
    drafted: with a fixed seed, a call drafting from a corpus that holds this very request samples the same tokens
    as one without a corpus, and repeats reproduce."""
    model = tiny_model("llama")
    ids = random_prompt(5, length=20)
    config = lade.LookaheadConfig(draft="merged", step_budget=12, sampling_seed=3)
    kw = dict(do_sample=True, temperature=0.7, top_k=0)
    corpus = lade.Corpus()
    without, _ = run(model, ids, config, None, **kw)
    outputs = [run(model, ids, config, corpus, **kw)[0] for _ in range(3)]
    assert all(torch.equal(out, without) for out in outputs)
    torch.manual_seed(9)
    a, _ = run(model, ids, "auto", corpus, **kw)
    torch.manual_seed(9)
    b, _ = run(model, ids, "auto", corpus, **kw)
    assert torch.equal(a, b)


def test_batches_learn_every_row_and_stay_exact():
    """A left-padded batch of three decodes as plain batched greedy, and the corpus stores each row's own prompt and
    output (no padding), so a later single call of one row's prompt is drafted from it."""
    model = tiny_model("llama")
    prompts = [random_prompt(40, length=10)[0], random_prompt(41, length=17)[0], random_prompt(42, length=13)[0]]
    ids, mask = lade.left_pad(prompts, 0)
    corpus = lade.Corpus()
    kw = dict(GREEDY, pad_token_id=0)
    out, _ = run(model, ids, CONFIGS["merged"], corpus, attention_mask=mask, pad_token_id=0)
    assert torch.equal(out, model.generate(ids, attention_mask=mask, **kw))
    assert corpus.requests == 3 and len(corpus) == sum(len(p) for p in prompts) + 3 * GREEDY["max_new_tokens"]
    single, stats = run(model, prompts[1][None], CONFIGS["corpus"], corpus)
    assert torch.equal(single, plain(model, prompts[1][None])) and stats.steps <= 4


def test_encoder_decoder_models_draft_from_the_corpus():
    """An encoder-decoder model's corpus holds its decoder tokens: a repeated source is decoded exactly, from the
    corpus, in far fewer steps."""
    model = tiny_seq2seq("bart")
    source = random_prompt(4)
    corpus = lade.Corpus()
    want = model.generate(source, attention_mask=torch.ones_like(source), **GREEDY)
    first, first_stats = run(model, source, CONFIGS["merged"], corpus)
    second, second_stats = run(model, source, CONFIGS["merged"], corpus)
    assert torch.equal(first, want) and torch.equal(second, want)
    # a third fewer steps at least: how many depends on the merged drafter's plan (its measured acceptance prior),
    # the copying itself on the longest step
    assert second_stats.steps * 3 <= first_stats.steps * 2
    assert max(second_stats.accepted_per_step) > max(first_stats.accepted_per_step)  # long steps copied from it
