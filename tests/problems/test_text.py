"""Text data: the Shakespeare corpus and a user's own files, their windows, the batches a
transformer trains on and what its evaluation reports.

Expected values come from the text itself (slices of the files the tests write, characters
counted by hand), never from the corpus code's own arrays.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim import problems
from gemsim.problems.data import _text_corpus as tc
from gemsim.problems.data import _text_sources as ts

TINY = problems.Transformer(layers=1, d_model=16, heads=2, context=8)

PLAY = """# A Play

## ACT I

### SCENE I. A room.

_Enter ANNE and BOB_

**ANNE**$
Good morrow, Bob.$
_\\[Aside]_$
How fares the day?

**BOB**$
Well \\[indeed].

_Exit ANNE, with
BOB following_

**ANNE**$
Farewell.
""".replace("$", "  ")  # markdown line breaks: two spaces


def test_a_play_is_read_speech_by_speech_without_directions_or_markup():
    assert ts.parse_play(PLAY) == [
        ("ANNE", "Good morrow, Bob.\nHow fares the day?\n"),
        ("BOB", "Well [indeed].\n"),
        ("ANNE", "Farewell.\n"),
    ]
    roles = dict(ts._roles("a-play", PLAY))
    assert roles == {
        "a-play/ANNE": "Good morrow, Bob.\nHow fares the day?\nFarewell.\n",
        "a-play/BOB": "Well [indeed].\n",
    }


@pytest.fixture(scope="module")
def shakespeare():
    return tc.read_corpus(problems.Shakespeare())


def test_shakespeare_corpus_holds_every_play_and_holds_out_four(shakespeare):
    plays = [name for name, _ in ts.shakespeare_plays()]
    assert len(plays) == 38 and set(problems.HELD_OUT_PLAYS) <= set(plays)
    names = shakespeare.group_names
    assert len(names) == len(set(names)) == len(shakespeare.segment_group)  # one per role
    assert not {n.split("/")[0] for n in names} & set(problems.HELD_OUT_PLAYS)
    assert "hamlet/HAMLET" in names
    roles, _ = ts._shakespeare_texts()
    kept = [(p, r, t) for p, r, t in roles if len(t) >= 1000]
    train = [t for p, _, t in kept if p not in problems.HELD_OUT_PLAYS]
    test = [t for p, _, t in kept if p in problems.HELD_OUT_PLAYS]
    assert len(shakespeare.train) == sum(map(len, train))
    assert len(shakespeare.test) == sum(map(len, test))
    assert 0.05 < len(shakespeare.test) / (len(shakespeare.train) + len(shakespeare.test)) < 0.15
    # the vocabulary: the training text's characters in sorted order, decoding back to it
    assert shakespeare.vocab == "".join(sorted(set("".join(train))))
    first = shakespeare.train_offsets[:2]
    assert shakespeare.decode(shakespeare.train[first[0] : first[1]]) == train[0]
    assert len(shakespeare.sha256) == 64


def test_plays_as_groups_and_bytes_as_vocabulary(shakespeare):
    by_play = tc.read_corpus(problems.Shakespeare(groups="play", vocab="bytes"))
    assert by_play.vocab_size == 256 and by_play.vocab is None
    assert len(by_play.group_names) == 38 - len(problems.HELD_OUT_PLAYS)
    assert by_play.sha256 == shakespeare.sha256
    text = shakespeare.decode(shakespeare.train[:500])
    assert by_play.decode(by_play.train[: len(text.encode())]) == text


def write(path, text, mode="w"):
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_a_folder_of_files_is_split_per_file_and_grouped_by_file(tmp_path):
    a = "abcdefghij" * 10  # 100 characters: 90 train, 10 test
    b = "zyxwvutsrq" * 5  # 50: 45 and 5
    write(tmp_path / "t" / "a.txt", a)
    write(tmp_path / "t" / "sub" / "b.txt", b)
    write(tmp_path / "t" / ".hidden", "ignored")
    corpus = tc.read_corpus(problems.Text(str(tmp_path / "t"), context=8, groups="by_file"))
    assert corpus.decode(corpus.train) == a[:90] + b[:45]
    assert corpus.decode(corpus.test) == a[90:] + b[45:]
    assert list(corpus.train_offsets) == [0, 90, 135]
    assert len(corpus.group_names) == 2 and corpus.vocab == "".join(sorted(set(a[:90] + b[:45])))
    windows = tc.corpus_windows(corpus, 8, "t")
    # every position whose 9 characters stay in one file: 90 - 8 and 45 - 8
    assert len(windows.starts) == 82 + 37
    assert list(windows.groups) == [0] * 82 + [1] * 37
    assert list(windows.test_starts) == [0]  # test: 10 and 5 characters, one window fits
    one = tc.read_corpus(problems.Text(str(tmp_path / "t"), context=8))
    assert len(one.group_names) == 1
    # hidden files are left out below the data set's folder, not above it; the digest is the
    # one a scenario records
    write(tmp_path / ".cache" / "t" / "a.txt", a)
    under = tc.read_corpus(problems.Text(str(tmp_path / ".cache" / "t"), context=8))
    assert under.decode(under.train) == a[:90]
    assert under.sha256 == problems.text_sha256(str(tmp_path / ".cache" / "t"))


def test_a_user_text_that_cannot_serve_is_refused_by_name(tmp_path):
    bad = write(tmp_path / "bad.txt", "good text" * 20 + "\n\xff\xfe", mode="w")
    bad.write_bytes(("good text" * 20).encode() + b"\xff ok")
    with pytest.raises(problems.TextError, match=r"bad\.txt.*byte 0xff at byte offset 180"):
        tc.read_corpus(problems.Text(str(bad)))
    as_bytes = tc.read_corpus(problems.Text(str(bad), vocab="bytes"))
    assert as_bytes.vocab_size == 256 and 0xFF in as_bytes.train.tolist() + as_bytes.test.tolist()
    with pytest.raises(problems.TextError, match="no such file or folder"):
        tc.read_corpus(problems.Text(str(tmp_path / "missing.txt")))
    write(tmp_path / "empty" / "e.txt", "")
    with pytest.raises(problems.TextError, match="empty"):
        tc.read_corpus(problems.Text(str(tmp_path / "empty")))
    short = write(tmp_path / "short.txt", "ab" * 10)
    corpus = tc.read_corpus(problems.Text(str(short), context=32))
    with pytest.raises(problems.TextError, match="context \\+ 1 = 33"):
        tc.corpus_windows(corpus, 32, "short")
    unknown = write(tmp_path / "unknown.txt", "aaaa bbbb " * 9 + "zzzzzzzzzz")
    with pytest.raises(problems.TextError, match="characters the training text lacks.*'z'"):
        tc.read_corpus(problems.Text(str(unknown)))


def test_transformer_spec_checks_its_fields():
    with pytest.raises(ValueError, match="heads must divide d_model.*heads 3 and d_model 16"):
        problems.Transformer(d_model=16, heads=3)
    with pytest.raises(ValueError, match="positions must be one of learned, rotary"):
        problems.Transformer(positions="sinusoid")
    with pytest.raises(ValueError, match="even head width"):
        problems.Transformer(d_model=12, heads=4, positions="rotary")
    with pytest.raises(ValueError, match="needs a text dataset"):
        problems.make_problem(TINY, problems.Digits(), batch_size=4, seed=0)
    with pytest.raises(ValueError, match="context 64 tokens, the model's context is 8"):
        problems.make_problem(TINY, problems.Shakespeare(), batch_size=4, seed=0)


@pytest.fixture(scope="module")
def problem():
    return problems.make_problem(
        TINY, problems.Shakespeare(context=8), batch_size=6, seed=3, eval_subset=20
    )


def test_the_default_transformer_is_about_a_million_parameters(shakespeare):
    spec = problems.Transformer()
    shape = problems.data_shape(problems.Shakespeare())
    assert shape.vocab_size == shakespeare.vocab_size == 70
    n = problems.param_count(spec, shape)
    params = problems.transformer_model(spec, 70).init(jax.random.key(0))
    assert n == sum(leaf.size for leaf in jax.tree.leaves(params)) == 810_496


def test_batches_are_windows_of_the_corpus_and_a_pure_function_of_worker_and_step(
    problem, shakespeare
):
    text = shakespeare.decode(shakespeare.train)
    offsets = shakespeare.train_offsets
    b = problem.batch(2, 7)
    again = problems.make_problem(
        TINY, problems.Shakespeare(context=8), batch_size=6, seed=3, eval_subset=20
    ).batch(2, 7)
    np.testing.assert_array_equal(b.x, again.x)
    np.testing.assert_array_equal(b.y, again.y)
    assert b.x.shape == b.y.shape == (6, 8) and b.x.dtype == jnp.int32
    np.testing.assert_array_equal(b.x[:, 1:], b.y[:, :-1])
    for row_x, row_y in zip(np.asarray(b.x), np.asarray(b.y), strict=True):
        window = shakespeare.decode(np.concatenate([row_x, row_y[-1:]]))
        starts = [i for i in range(len(text)) if text.startswith(window, i)]
        # the window lies inside one role's text
        assert any(np.searchsorted(offsets, s, "right") == np.searchsorted(offsets, s + 8, "right")
                   for s in starts)  # fmt: skip
    other = problem.batch(3, 7)
    assert not np.array_equal(np.asarray(other.x), np.asarray(b.x))


def test_evaluation_is_nats_bits_and_perplexity_of_the_held_out_windows(problem, shakespeare):
    params = problem.init_params
    got = jax.device_get(problem.evaluate(params))
    model = problems.transformer_model(TINY, shakespeare.vocab_size)
    windows = tc.corpus_windows(shakespeare, 8, "s")
    from gemsim.problems._text import held_out_windows

    starts = windows.test_starts[held_out_windows(len(windows.test_starts), 20)]
    assert len(starts) == 20 and problem.test_size == 20
    seqs = np.stack([shakespeare.test[s : s + 9] for s in starts])
    logits = model.apply(params, jnp.asarray(seqs[:, :-1]), None)
    log_p = np.asarray(jax.nn.log_softmax(logits, axis=-1), np.float64)
    nll = -np.take_along_axis(log_p, seqs[:, 1:, None], axis=-1)[..., 0]
    assert got["test_loss"] == pytest.approx(nll.mean(), rel=1e-5)
    assert got["test_bits_per_char"] == pytest.approx(nll.mean() / math.log(2), rel=1e-5)
    assert got["test_perplexity"] == pytest.approx(math.exp(nll.mean()), rel=1e-5)
    hits = np.argmax(np.asarray(logits), axis=-1) == seqs[:, 1:]
    assert got["test_accuracy"] == pytest.approx(hits.mean(), abs=1e-6)
    # a fresh model knows nothing: about log(vocab) nats per character
    assert abs(got["train_loss"] - math.log(shakespeare.vocab_size)) < 0.3


def test_speaking_roles_as_clients_each_stream_their_own_text():
    spec = problems.Shakespeare(context=8, min_chars=20000)
    corpus = tc.read_corpus(spec)
    n = len(corpus.group_names)
    split = problems.DataSplit(problems.Groups(), (), None)
    prob = problems.make_problem(
        TINY, spec, batch_size=4, seed=0, eval_subset=8, split=split, n_workers=n,
        eval_per_worker=3,
    )  # fmt: skip
    windows = tc.corpus_windows(corpus, 8, "s")
    names = sorted(set(range(n)))  # groups are ids 0..n-1 in order of the roles
    for worker in (0, n // 2, n - 1):
        role = names[worker]
        lo = corpus.train_offsets[np.flatnonzero(corpus.segment_group == role)[0]]
        hi = corpus.train_offsets[np.flatnonzero(corpus.segment_group == role)[0] + 1]
        role_text = corpus.decode(corpus.train[lo:hi])
        b = prob.batch(worker, 5)
        for row_x, row_y in zip(np.asarray(b.x), np.asarray(b.y), strict=True):
            assert corpus.decode(np.concatenate([row_x, row_y[-1:]])) in role_text
    sizes = prob.worker_facts()["shard_size"]
    assert sizes.sum() == len(windows.starts)
    per = jax.device_get(prob.evaluate_workers(prob.init_params))
    assert per["loss"].shape == (n,) and np.all(np.isfinite(per["loss"]))
