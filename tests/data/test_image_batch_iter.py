"""ImageBatchIter: worker processes read, transform and batch the listed images."""

import gc
import threading

import numpy as np
import pytest
from fork_hazards import lock_held_over_garbage

from singa.data import ImageBatchIter

Image = pytest.importorskip("PIL.Image")


@pytest.fixture
def image_list(tmp_path):
    lines = []
    for i in range(6):
        Image.fromarray(np.full((4, 5, 3), i * 10, np.uint8), "RGB").save(tmp_path / f"{i}.png")
        lines.append(f"{i}.png,{i % 3}")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    return tmp_path


def _load(path):
    return [Image.open(path)]


def _twice(path):
    img = Image.open(path)
    return [img, img.transpose(Image.FLIP_LEFT_RIGHT)]


def _values(x):
    return [int(v) for v in x[:, 0, 0, 0]]


def _listed(image_list, batch_size, transform, **kw):
    """An ImageBatchIter over the fixture's comma-separated list of six images."""
    return ImageBatchIter(
        str(image_list / "list.txt"), batch_size, transform, delimiter=",", image_folder=str(image_list), **kw
    )


def test_batches_in_list_order_with_int_labels(image_list):
    it = _listed(image_list, 4, _load, shuffle=False)
    with it:
        x, y = next(it)
        assert x.shape == (4, 3, 4, 5) and x.dtype == np.float32
        assert _values(x) == [0, 10, 20, 30] and y.dtype == np.int32 and list(y) == [0, 1, 2, 0]
        x, y = it.next()
        assert _values(x) == [40, 50, 0, 10]  # wraps around to the start of the list


def test_shuffled_order_is_the_same_for_any_number_of_workers(image_list):
    def first_batches(workers):
        it = _listed(image_list, 3, _load, shuffle=True, num_workers=workers, seed=5)
        with it:
            return [_values(next(it)[0]) for _ in range(4)]

    one = first_batches(1)
    assert one == first_batches(3)
    assert sorted(one[0] + one[1]) == [0, 10, 20, 30, 40, 50]  # each pass visits every file once


def test_several_images_per_file_and_string_metas(tmp_path):
    Image.new("RGB", (2, 2)).save(tmp_path / "a.png")
    (tmp_path / "l.txt").write_text("a.png cat\na.png\n")
    with ImageBatchIter(str(tmp_path / "l.txt"), 4, _twice, shuffle=False, image_folder=str(tmp_path)) as it:
        x, y = next(it)
    assert x.shape == (4, 3, 2, 2) and y == ["cat", "cat", None, None]


def test_a_failing_transform_is_reported(image_list):
    def bad(path):
        raise OSError("cannot decode " + path)

    it = _listed(image_list, 2, bad)
    it.start()
    with pytest.raises(RuntimeError, match="cannot decode"):
        next(it)
    it.end()


def test_a_batch_size_the_transform_cannot_fill(image_list):
    it = _listed(image_list, 3, _twice)
    with it, pytest.raises(RuntimeError, match="does not divide batch_size 3"):
        next(it)


def test_argument_errors(tmp_path, image_list):
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(ValueError, match="lists no images"):
        ImageBatchIter(str(tmp_path / "empty.txt"), 2, _load)
    with pytest.raises(ValueError, match="must be >= 1"):
        ImageBatchIter(str(image_list / "list.txt"), 0, _load)
    with pytest.raises(RuntimeError, match="start"):
        next(ImageBatchIter(str(image_list / "list.txt"), 2, _load))


def _load_collecting(path):
    gc.collect()  # in the worker: must not reach the garbage the parent left
    return [Image.open(path)]


def test_workers_never_run_the_finalizers_of_the_parents_garbage(image_list):
    got = []
    with lock_held_over_garbage():
        it = _listed(image_list, 3, _load_collecting, shuffle=False)
        with it:  # read on a thread: a regression fails here instead of hanging the suite
            reader = threading.Thread(target=lambda: got.extend(_values(next(it)[0]) for _ in range(2)))
            reader.start()
            reader.join(timeout=60)
            assert not reader.is_alive(), "a worker is stuck in the parent's garbage"
    assert got == [[0, 10, 20], [30, 40, 50]]
