"""Tasks: shapes, fixed splits from the seed, the generated tasks' definitions, the IDX reader."""

from __future__ import annotations

import math
from itertools import islice

import numpy as np
import pytest
import torch

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.tasks import IGNORE, LOADERS, TaskUnavailable, load_task, read_idx
from workers.engine.tasks.charlm import VOCAB_SIZE, decode, encode
from workers.engine.tasks.synthetic import COPY_LENGTH, COPY_VOCAB, adding_batch, copy_batch

# (spec overrides, batch x shape without B, val x shape without N, target shape without B)
SHAPES = {
    "digits": ({}, (64,), (64,), ()),
    "mnist1d": ({}, (40,), (40,), ()),
    "seq-digits": ({}, (8, 8), (8, 8), ()),
    "pixel-digits": ({}, (64, 1), (64, 1), ()),
    "pixel-mnist5k": ({}, (784, 1), (784, 1), ()),
    "mnist5k": ({}, (784,), (784,), ()),
    "conv-digits": ({}, (1, 8, 8), (1, 8, 8), ()),
    "conv-mnist5k": ({}, (1, 28, 28), (1, 28, 28), ()),
    "adding": ({"seq_len": 12, "eval_seq_len": 30}, (12, 2), (30, 2), ()),
    "copy": ({"seq_len": 5, "eval_seq_len": 9}, (25, COPY_VOCAB), (29, COPY_VOCAB), (25,)),
    "charlm": ({"seq_len": 16, "eval_seq_len": 40}, (16, VOCAB_SIZE), (40, VOCAB_SIZE), (16,)),
    "mnist": ({}, (784,), (784,), ()),
}


def test_every_catalog_task_has_a_loader():
    assert set(LOADERS) == set(TASKS)


@pytest.mark.parametrize("task", sorted(SHAPES))
def test_task_loads_with_the_right_shapes(task, settings, mnist_settings):
    overrides, x_shape, val_shape, y_shape = SHAPES[task]
    data = load_task(RunSpec(task=task, **overrides), mnist_settings if task == "mnist" else settings)
    x, y = next(data.train_batches(5, torch.Generator().manual_seed(0)))
    assert x.dtype == torch.float32 and tuple(x.shape) == (5, *x_shape)
    assert tuple(y.shape) == (5, *y_shape)
    assert y.dtype == (torch.float32 if data.info.target == "regression" else torch.long)
    for split in ("val", "test"):
        vx, vy = data.split(split)
        assert tuple(vx.shape[1:]) == val_shape and len(vx) == len(vy) > 0
        assert torch.isfinite(vx).all()
    assert data.info.name == task
    if data.info.target != "regression":
        assert int(y.max()) < data.n_outputs


@pytest.mark.parametrize(
    "task",
    [
        "digits",
        "mnist1d",
        "seq-digits",
        "pixel-digits",
        "pixel-mnist5k",
        "mnist5k",
        "conv-mnist5k",
        "adding",
        "copy",
        "charlm",
        "mnist",
    ],
)
def test_splits_are_fixed_by_the_seed_and_differ_between_seeds(task, settings, mnist_settings):
    s = mnist_settings if task == "mnist" else settings
    a, b, c = (load_task(RunSpec(task=task, seed=seed), s) for seed in (3, 3, 4))
    for split in ("val", "test"):
        assert torch.equal(a.split(split)[0], b.split(split)[0])
    assert not torch.equal(a.split("val")[0], c.split("val")[0])
    if a.train is not None:
        assert torch.equal(a.train[0], b.train[0]) and not torch.equal(a.train[0], c.train[0])


def test_digits_splits_partition_the_data_and_are_standardized_on_train(settings):
    data = load_task(RunSpec(task="digits"), settings)
    sizes = [len(data.train[1]), len(data.split("val")[1]), len(data.split("test")[1])]
    assert sum(sizes) == 1797
    mean = data.train[0].mean(0)
    assert mean.abs().max() < 1e-4  # standardized with the training split's own statistics
    rows = {tuple(r.tolist()) for r in data.train[0][:200]}
    assert not rows & {tuple(r.tolist()) for r in data.split("test")[0]}


def test_training_batches_repeat_with_the_generator_and_cover_an_epoch(settings):
    data = load_task(RunSpec(task="digits"), settings)
    first = [y for _, y in islice(data.train_batches(7, torch.Generator().manual_seed(1)), 3)]
    again = [y for _, y in islice(data.train_batches(7, torch.Generator().manual_seed(1)), 3)]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    n = data.train_size
    batches = data.train_batches(n, torch.Generator().manual_seed(2))
    _, y_epoch = next(batches)
    assert torch.equal(torch.sort(y_epoch).values, torch.sort(data.train[1]).values)  # each case once


def test_adding_targets_are_the_sum_of_the_two_marked_values():
    x, y = adding_batch(64, 40, torch.Generator().manual_seed(0))
    markers = x[..., 1]
    assert torch.equal(markers.sum(1), torch.full((64,), 2.0))
    assert (markers[:, :20].sum(1) == 1).all() and (markers[:, 20:].sum(1) == 1).all()
    torch.testing.assert_close(y, (x[..., 0] * markers).sum(1))


def test_copy_targets_recall_the_first_symbols_after_the_delimiter():
    delay = 7
    x, y = copy_batch(16, delay, torch.Generator().manual_seed(0))
    ids = x.argmax(-1)
    assert x.shape == (16, delay + 2 * COPY_LENGTH, COPY_VOCAB) and torch.equal(x.sum(-1), torch.ones(16, 27))
    assert torch.equal(y[:, -COPY_LENGTH:], ids[:, :COPY_LENGTH])
    assert (y[:, :-COPY_LENGTH] == IGNORE).all()
    assert (ids[:, COPY_LENGTH + delay - 1] == COPY_VOCAB - 1).all()  # the delimiter: "recall now"
    assert (ids[:, COPY_LENGTH : COPY_LENGTH + delay - 1] == 0).all() and (ids[:, -COPY_LENGTH:] == 0).all()


def test_per_step_loss_and_accuracy_count_the_recall_positions_only(settings):
    data = load_task(RunSpec(task="copy", seq_len=3), settings)
    x, y = data.split("val")
    perfect = torch.full((*y.shape, COPY_VOCAB), -10.0)
    perfect.scatter_(-1, y.clamp(min=0)[..., None], 10.0)
    perfect[y == IGNORE] = 0.0  # uniform elsewhere: would cost ln 10 per step if those steps counted
    m = data.metrics(perfect, y)
    assert m["accuracy"] == 1.0 and m["loss"] < 1e-6


def test_charlm_reports_bits_per_character_and_encodes_printable_text(settings):
    text = "def f(x):\n\treturn x + 1  # ok"
    assert decode(encode(text.encode())) == text
    assert encode("é".encode())[0] == VOCAB_SIZE - 1  # non-ASCII bytes are the unknown symbol
    data = load_task(RunSpec(task="charlm", seq_len=8, eval_seq_len=8), settings)
    x, y = data.split("val")
    assert torch.equal(x[:, 1:].argmax(-1), y[:, :-1])  # the target is the next character
    uniform = torch.zeros(*y.shape, VOCAB_SIZE)
    m = data.metrics(uniform, y)
    assert m["bpc"] == pytest.approx(math.log2(VOCAB_SIZE), rel=1e-5)


def test_adding_reports_mse_from_the_last_step(settings):
    data = load_task(RunSpec(task="adding", seq_len=10), settings)
    x, y = data.split("val")
    outputs = torch.zeros(len(y), 10, 1)
    outputs[:, -1, 0] = 1.0
    m = data.metrics(outputs, y)
    assert m["mse"] == pytest.approx(float(((y - 1.0) ** 2).mean()), rel=1e-5)
    assert 0.1 < m["mse"] < 0.25  # predicting the mean scores ≈ 1/6


@pytest.mark.parametrize("compress", [False, True])
def test_idx_reader_reads_raw_and_gzip_files(tmp_path, compress, idx_writer):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = idx_writer(tmp_path / "images-idx3-ubyte", array, compress)
    assert path.name.endswith(".gz") == compress
    out = read_idx(path)
    assert out.shape == (2, 3, 4) and np.array_equal(out, array)


def test_idx_reader_refuses_a_file_that_is_not_idx(tmp_path):
    bad = tmp_path / "x-idx3-ubyte"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n....")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(bad)
    short = tmp_path / "y-idx1-ubyte"
    short.write_bytes(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + b"abc")
    with pytest.raises(ValueError, match="header says"):
        read_idx(short)


def test_mnist_reads_raw_idx_files_and_keeps_the_published_test_set(tmp_path, tiny_mnist_writer):
    tiny_mnist_writer(tmp_path, compress=False)
    data = load_task(RunSpec(task="mnist"), Settings(data_dir=tmp_path))
    assert len(data.train[1]) + len(data.split("val")[1]) == 60 and len(data.split("test")[1]) == 20
    assert data.input_dim == 784 and data.n_outputs == 10


def test_missing_mnist_names_the_folder_to_fill(tmp_path):
    with pytest.raises(TaskUnavailable) as err:
        load_task(RunSpec(task="mnist"), Settings(data_dir=tmp_path))
    assert str(tmp_path / "mnist") in str(err.value) and "digits" in str(err.value)


def test_mnist1d_is_read_from_the_shipped_arrays_and_keeps_the_published_split(settings):
    first = load_task(RunSpec(task="mnist1d"), settings)
    again = load_task(RunSpec(task="mnist1d"), settings)
    assert torch.equal(first.split("test")[0], again.split("test")[0])
    assert first.split("test")[0].shape == (1000, 40)  # MNIST-1D's published 4000/1000 split
    assert not (settings.data_dir / "cache").exists()  # nothing generated or cached at run time


def test_mnist5k_is_the_shipped_mnist_subset_with_every_class_and_pixel_order_kept(settings):
    from workers.engine.tasks.mnist5k import raw_mnist5k

    x, y = raw_mnist5k()
    assert x.shape == (5000, 784) and x.max() == 255 and np.bincount(y).tolist() == [500] * 10
    data = load_task(RunSpec(task="mnist5k", seed=0), settings)
    assert len(data.train[1]) + len(data.split("val")[1]) + len(data.split("test")[1]) == 5000
    # standardized with the training split's statistics: its per-pixel means are 0
    assert float(data.train[0].mean(0).abs().max()) < 1e-4


def test_conv_mnist5k_is_mnist5k_as_images_standardized_with_one_training_scalar(settings):
    from workers.engine.tasks.digits import split_indices
    from workers.engine.tasks.mnist5k import raw_mnist5k

    flat = load_task(RunSpec(task="mnist5k", seed=1), settings)
    conv = load_task(RunSpec(task="conv-mnist5k", seed=1), settings)
    assert torch.equal(flat.split("val")[1], conv.split("val")[1])  # the same split from the same seed
    # by definition: (pixels − mean) / std with the training split's mean and std over all its pixels
    x, _ = raw_mnist5k()
    parts = split_indices(5000, 1)
    raw = torch.from_numpy(x)
    train = raw[parts["train"]]
    want = ((raw[parts["val"]] - train.mean()) / train.std()).reshape(-1, 1, 28, 28)
    torch.testing.assert_close(conv.split("val")[0], want, rtol=1e-5, atol=1e-5)
    assert conv.input_dim == 1 and conv.n_outputs == 10


def test_pixel_mnist5k_reads_the_28x28_digits_one_pixel_per_step_in_mnist5ks_split(settings):
    from workers.engine.tasks.digits import split_indices
    from workers.engine.tasks.mnist5k import raw_mnist5k

    flat = load_task(RunSpec(task="mnist5k", seed=3), settings)
    pixels = load_task(RunSpec(task="pixel-mnist5k", seed=3), settings)
    assert pixels.seq_len == pixels.eval_seq_len == 784 and pixels.input_dim == 1 and pixels.n_outputs == 10
    # the same split from the same seed: same labels in the same order, and every case present once
    for split in ("val", "test"):
        assert torch.equal(flat.split(split)[1], pixels.split(split)[1])
    sizes = [len(pixels.train[1]), len(pixels.split("val")[1]), len(pixels.split("test")[1])]
    assert sizes == [3500, 750, 750]
    # by definition, computed here in float64 from the raw pixels: (pixel − mean) / std with one mean and
    # std over all of the training split's pixels, then row by row, one pixel per time step
    x, _ = raw_mnist5k()
    parts = split_indices(5000, 3)
    raw = torch.from_numpy(x.astype(np.float64))
    train = raw[parts["train"]]
    for split in ("train", "val"):
        want = ((raw[parts[split]] - train.mean()) / train.std()).reshape(-1, 784, 1)
        got = pixels.train[0] if split == "train" else pixels.split(split)[0]
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    # the training split's pixels, all together, have mean 0 and std 1; the top-left pixel is background
    assert abs(float(pixels.train[0].double().mean())) < 1e-4
    assert float(pixels.train[0].double().std()) == pytest.approx(1.0, abs=1e-4)
    assert float(pixels.train[0][0, 0, 0]) == pytest.approx(float(-train.mean() / train.std()), rel=1e-5)


def test_pixel_digits_reads_the_row_by_row_digits_one_pixel_per_step(settings):
    rows = load_task(RunSpec(task="seq-digits", seed=2), settings)
    pixels = load_task(RunSpec(task="pixel-digits", seed=2), settings)
    # seq-digits standardizes with one global scalar, as does pixel-digits: the same numbers, re-shaped
    assert torch.equal(pixels.split("val")[0].reshape(-1, 8, 8), rows.split("val")[0])
    assert pixels.seq_len == 64


def test_handwriting_lines_are_next_point_pairs_with_pen_lifts(settings):
    data = load_task(RunSpec(task="handwriting", seq_len=50), settings)
    x, y = next(data.train_batches(4, torch.Generator().manual_seed(0)))
    assert x.shape == y.shape == (4, 50, 3)
    assert torch.equal(x[:, 1:], y[:, :-1])  # the target is the next point
    assert set(x[..., 2].unique().tolist()) == {0.0, 1.0} and data.n_outputs == 121
    assert torch.equal(
        load_task(RunSpec(task="handwriting", seq_len=50), settings).split("val")[0], data.split("val")[0]
    )


def test_mixture_nll_is_the_bivariate_gaussian_and_bernoulli_likelihood():
    from workers.engine.tasks.handwriting import MIXTURES, mixture_nll

    gen = torch.Generator().manual_seed(0)
    y = torch.randn(2, 3, 3, generator=gen, dtype=torch.float64)
    y[..., 2] = (y[..., 2] > 0).double()
    out = torch.randn(2, 3, 1 + 6 * MIXTURES, generator=gen, dtype=torch.float64)
    rest = out[..., 1:].reshape(2, 3, 6, MIXTURES)
    rest[..., 0, 1:] = -1e4  # every weight on component 0
    out[..., 1:] = rest.reshape(2, 3, -1)
    mu = torch.stack([rest[..., 1, 0], rest[..., 2, 0]], -1)
    s1, s2, rho = rest[..., 3, 0].exp(), rest[..., 4, 0].exp(), torch.tanh(rest[..., 5, 0]) * (1 - 1e-4)
    off = rho * s1 * s2
    cov = torch.stack([torch.stack([s1 * s1, off], -1), torch.stack([off, s2 * s2], -1)], -2)
    log_n = torch.distributions.MultivariateNormal(mu, covariance_matrix=cov).log_prob(y[..., :2])
    p = torch.sigmoid(out[..., 0])
    log_pen = y[..., 2] * p.log() + (1 - y[..., 2]) * (1 - p).log()
    expected = -(log_n + log_pen).mean()
    torch.testing.assert_close(mixture_nll(out, y).double(), expected, rtol=1e-5, atol=1e-5)


def test_draw_digits_are_binarized_once_and_a_zero_model_scores_196_ln2_with_no_kl(settings):
    from workers.engine.tasks.draw import PIXELS, DrawVAE

    a = load_task(RunSpec(task="draw", seed=0), settings)
    b = load_task(RunSpec(task="draw", seed=1), settings)
    x = a.split("val")[0]
    assert set(x.unique().tolist()) == {0.0, 1.0} and x.shape[1] == PIXELS
    assert torch.equal(
        torch.cat([a.train[0], *(a.split(s)[0] for s in ("val", "test"))]).sum(0),
        torch.cat([b.train[0], *(b.split(s)[0] for s in ("val", "test"))]).sum(0),
    )
    model = DrawVAE(8, "layer").eval()
    with torch.no_grad():
        for p in (*model.q.parameters(), *model.write.parameters()):
            p.zero_()  # q = N(0, I) exactly, canvas 0: every pixel costs ln 2, KL = 0
    out = model(x[:4])
    torch.testing.assert_close(out[:, 0], torch.full((4,), PIXELS * math.log(2)))
    torch.testing.assert_close(out[:, 1], torch.zeros(4))


def test_order_embed_captions_name_the_image_and_recall_is_one_for_identical_embeddings(settings):
    from workers.engine.tasks.order_embed import (
        FILLERS,
        LENGTH,
        PIXELS,
        VOCAB,
        digit_images,
        retrieval_metrics,
    )

    data = load_task(RunSpec(task="order-embed", seed=0), settings)
    x, y = data.split("val")
    tokens = x[:, PIXELS:].long()
    assert tokens.shape[1] == LENGTH
    digit = tokens[tokens < 10].reshape(-1)
    assert torch.equal(digit, y)  # exactly one digit word, the image's class
    assert int((tokens >= len(VOCAB) - len(FILLERS)).sum(1).min()) == LENGTH - 3
    assert digit_images()[2].shape == (5000, 3)
    f = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    f = torch.abs(torch.nn.functional.normalize(f))
    assert retrieval_metrics(torch.cat([f, f], 1), y[:50])["recall"] == 1.0


def test_digits_mse_is_digits_with_one_hot_targets_scored_by_squared_error(settings):
    plain = load_task(RunSpec(task="digits", seed=3), settings)
    data = load_task(RunSpec(task="digits-mse", seed=3), settings)
    for split in ("val", "test"):
        (x, y), (px, py) = data.split(split), plain.split(split)
        assert torch.equal(x, px) and y.shape == (len(py), 10)
        assert torch.equal(y.argmax(1), py) and torch.equal(y.sum(1), torch.ones(len(py)))
    assert data.train_size == plain.train_size == 1258  # the preset's full batch
    out = torch.randn(len(py), 10, dtype=torch.float64)
    want = sum(float((out[i, k] - y[i, k]) ** 2) for i in range(len(py)) for k in range(10)) / (10 * len(py))
    m = data.metrics(out, y.double())
    # the loss is computed in float32
    assert m["loss"] == pytest.approx(want, rel=1e-6) and m["mse"] == pytest.approx(want, rel=1e-6)
    # a batch of the training split's size is the whole split: full-batch gradient descent
    xb, yb = next(data.train_batches(1258, torch.Generator().manual_seed(0)))
    assert xb.shape[0] == 1258 and torch.equal(yb.sum(0), data.train[1].sum(0))
