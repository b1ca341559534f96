"""The extraction loop: identical files whatever the queue depth, and its CUDA-only code
(the compute stream, events, pinned copies, decoding in the main process, graph replay) run
on the CPU through a stand-in for the CUDA API."""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import numpy as np
import pytest
import torch

import vprom.features.pipeline as pipeline
from vprom.features.extract import extract
from tests.features.test_extract import config, datasets


class FakeCuda:
    """The calls `CudaStreams` and `GraphedTrunk` make, done synchronously on the CPU, and
    counted."""

    def __init__(self):
        self.log = []
        api = self

        class Stream:
            def __init__(self, device=None):
                api.log.append(("new stream",))

            def wait_stream(self, other):
                api.log.append(("wait",))

        class Event:
            def record(self, stream=None):
                api.log.append(("event",))

            def synchronize(self):
                api.log.append(("synchronize",))

        self.Stream, self.Event = Stream, Event

    @contextmanager
    def stream(self, stream):
        self.log.append(("on",))
        yield

    def current_stream(self, device):
        return self.Stream()

    def record(self, tensor, stream):
        self.log.append(("record",))

    def pinned(self, like):
        self.log.append(("pinned",))
        return torch.empty(like.shape, dtype=like.dtype)

    def capture(self, fn, device):
        """Like a real capture, one graph whose replay rewrites the tensor `fn` returned."""
        self.log.append(("capture",))
        out = fn()

        def replay():
            self.log.append(("replay",))
            out.copy_(fn())

        return replay, out

    def count(self, kind: str) -> int:
        return sum(e[0] == kind for e in self.log)


@pytest.fixture
def fake_cuda():
    return FakeCuda()


def use(monkeypatch, fake) -> None:
    """Make the loop take the CUDA path's streams, through `fake`."""
    monkeypatch.setattr(pipeline, "streams_for",
                        lambda device, api=None: pipeline.CudaStreams(device, fake))


@pytest.mark.parametrize("in_flight", [1, 3])
def test_the_overlapped_loop_writes_what_the_plain_loop_writes(dataset, vg_dir, tmp_path,
                                                               in_flight):
    plain = tmp_path / "plain.h5"
    extract(config(dataset, vg_dir, plain, in_flight=0))
    queued = tmp_path / "queued.h5"
    extract(config(dataset, vg_dir, queued, in_flight=in_flight, batch_size=2))
    again = tmp_path / "plain2.h5"
    extract(config(dataset, vg_dir, again, in_flight=0, batch_size=2))
    assert datasets(queued) == datasets(again)
    assert datasets(plain)[0] == datasets(queued)[0]  # same crops; batch size changes numbers


def test_the_cuda_streams_give_the_same_file(dataset, vg_dir, tmp_path, fake_cuda,
                                            monkeypatch):
    plain = tmp_path / "plain.h5"
    extract(config(dataset, vg_dir, plain, in_flight=0, chunk_batches=2))
    use(monkeypatch, fake_cuda)
    out = tmp_path / "cuda.h5"
    extract(config(dataset, vg_dir, out, in_flight=2, chunk_batches=2))
    assert datasets(out) == datasets(plain)
    batches = 3  # 10 distinct boxes in batches of 4: each copied out once, and awaited
    assert fake_cuda.count("pinned") == fake_cuda.count("synchronize") == batches


@pytest.mark.parametrize("backbone, region", [("resnet18", "crop"),
                                              ("bottomup-r101", "roi")])
def test_decoding_on_the_device_gives_one_file_whoever_reads_the_jpegs(
        dataset, vg_dir, tmp_path, fake_cuda, monkeypatch, backbone, region):
    """`--decode gpu`: the JPEGs' bytes, read by this process or by DataLoader workers, are
    decoded and cut on the device (here the CPU), on the CUDA path's streams too: one file,
    close to Pillow's."""
    options = dict(backbone=backbone, region=region, decode="gpu",
                   input_size=64 if region == "roi" else 32)
    inline = tmp_path / "inline.h5"
    extract(config(dataset, vg_dir, inline, workers=0, **options))
    workers = tmp_path / "workers.h5"
    extract(config(dataset, vg_dir, workers, workers=2, **options))
    use(monkeypatch, fake_cuda)
    device = tmp_path / "device.h5"
    extract(config(dataset, vg_dir, device, workers=0, **options))
    assert fake_cuda.count("record") > 0  # decoded images handed over to the compute stream
    assert datasets(device) == datasets(workers) == datasets(inline)
    monkeypatch.undo()
    pillow = tmp_path / "pillow.h5"
    extract(config(dataset, vg_dir, pillow, workers=0, **{**options, "decode": "cpu"}))
    a, b = (np.frombuffer(datasets(p)[1], np.float32) for p in (pillow, device))
    assert np.abs(a - b).max() < 0.05


@pytest.mark.parametrize("batch_size", [5, 4])
def test_cuda_graphs_replay_the_trunk_and_give_the_eager_file(dataset, vg_dir, tmp_path,
                                                              fake_cuda, monkeypatch, batch_size):
    """`--cuda-graphs`: one capture, one replay per batch, the eager forward's features. With
    full batches (10 boxes in 5s) the bytes are the same; a short last batch (10 in 4s) runs
    padded to the batch size, which may change its rows' rounding, not their values."""
    import vprom.features.extract as extract_module

    eager = tmp_path / "eager.h5"
    extract(config(dataset, vg_dir, eager, batch_size=batch_size))
    use(monkeypatch, fake_cuda)
    monkeypatch.setattr(pipeline, "run_chunks", partial(pipeline.run_chunks, api=fake_cuda))
    monkeypatch.setattr(extract_module, "GRAPH_DEVICES", ("cuda", "cpu"))
    graphed = tmp_path / "graphed.h5"
    extract(config(dataset, vg_dir, graphed, batch_size=batch_size, cuda_graphs=True))
    assert fake_cuda.count("capture") == 1
    assert fake_cuda.count("replay") == -(-10 // batch_size)
    a, b = datasets(eager), datasets(graphed)
    assert a[0] == b[0]
    if batch_size == 5:
        assert a[1] == b[1]
    else:
        assert np.allclose(np.frombuffer(a[1], np.float32), np.frombuffer(b[1], np.float32),
                           rtol=0, atol=1e-5)


def test_a_trunk_that_cannot_be_captured_is_a_clear_error(dataset, vg_dir, tmp_path,
                                                          fake_cuda, monkeypatch):
    import vprom.features.extract as extract_module
    from vprom.errors import VpromError

    def capture(fn, device):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(fake_cuda, "capture", capture)
    use(monkeypatch, fake_cuda)
    monkeypatch.setattr(pipeline, "run_chunks", partial(pipeline.run_chunks, api=fake_cuda))
    monkeypatch.setattr(extract_module, "GRAPH_DEVICES", ("cuda", "cpu"))
    out = tmp_path / "graphed.h5"
    with pytest.raises(VpromError, match=r"resnet18 trunk could not be captured in a CUDA "
                                         r"graph \(operation not permitted when stream is "
                                         r"capturing\); run again without --cuda-graphs"):
        extract(config(dataset, vg_dir, out, cuda_graphs=True))
    assert not out.exists()


def test_cuda_graphs_are_refused_where_they_cannot_run(dataset, vg_dir, tmp_path):
    from vprom.errors import VpromError

    out = tmp_path / "f.h5"
    with pytest.raises(VpromError, match="needs a CUDA device"):
        extract(config(dataset, vg_dir, out, cuda_graphs=True))
    with pytest.raises(VpromError, match="--region crop and without --compile"):
        config(dataset, vg_dir, out, cuda_graphs=True, compile=True)
    with pytest.raises(VpromError, match="--region crop and without --compile"):
        config(dataset, vg_dir, out, cuda_graphs=True, region="roi",
               backbone="bottomup-r101")
    assert not out.exists()


def test_a_chunk_is_written_when_its_last_batch_lands(dataset, vg_dir, tmp_path, monkeypatch):
    written = []
    write_chunk = pipeline.write_chunk

    def spy(job, c, rows, failed):
        written.append((c, rows.shape, np.isnan(rows).any()))
        write_chunk(job, c, rows, failed)

    monkeypatch.setattr(pipeline, "write_chunk", spy)
    extract(config(dataset, vg_dir, tmp_path / "f.h5", chunk_batches=2, in_flight=5))
    assert written == [(0, (8, 512), False), (1, (2, 512), False)]


def test_workers_0_prepares_the_batches_the_dataloader_workers_prepare(dataset, vg_dir):
    """`--workers 0` (a CPU device's default): this process decodes each batch, its image
    groups in threads, between forwards; the batches are those of the worker processes, in
    their order, however many batches it decodes ahead."""
    from vprom.features.crops import CropDataset, batch_layout, collate
    from vprom.tables import read_crop_table

    layout = batch_layout(read_crop_table(dataset), 3, 1)
    crops = CropDataset(layout, layout.image_paths(vg_dir), 32)
    processes = torch.utils.data.DataLoader(crops, batch_sampler=layout.batches,
                                            collate_fn=collate, num_workers=2)
    expected = list(processes)
    assert len(expected) == len(layout.batches) > 2
    for ahead in (1, 2, len(expected) + 1):
        inline = list(pipeline.inline_batches(crops, layout.batches, 2, pin=False, ahead=ahead))
        assert len(inline) == len(expected)
        for a, b in zip(inline, expected):
            assert np.array_equal(a.units, b.units) and torch.equal(a.pixels, b.pixels)
            assert a.failed == b.failed


def test_crops_without_an_image_are_nan_rows_of_the_files_shape(dataset, vg_dir, tmp_path):
    """Every image corrupt: no batch has a result, yet the rows get the features' shape."""
    import h5py

    extract(config(dataset, vg_dir, tmp_path / "found.h5"))
    for jpeg in vg_dir.rglob("*.jpg"):
        jpeg.write_bytes(b"not a jpeg")
    extract(config(dataset, vg_dir, tmp_path / "lost.h5", allow_missing=True))
    with h5py.File(tmp_path / "found.h5", "r") as found, h5py.File(tmp_path / "lost.h5",
                                                                   "r") as lost:
        assert lost["features"].shape == found["features"].shape == (len(found["crop_id"]), 512)
        assert np.isnan(lost["features"][()]).all()


def test_a_batch_a_worker_sends_arrives_whole():
    """A DataLoader worker sends a batch's crops and images (or file bytes) to the loop."""
    from multiprocessing.reduction import ForkingPickler

    from vprom.features.crops import Batch, Source

    datas = [torch.arange(5, dtype=torch.uint8), torch.full((3, 2, 4), 7, dtype=torch.uint8)]
    sources = [Source(i, f"{i}.jpg", d, i == 0, np.array([i]), np.array([[0, 0, 2, 2]]))
               for i, d in enumerate(datas)]
    sent = Batch(np.array([9]), torch.ones(1, 4, 4, 3, dtype=torch.uint8), sources)
    got = ForkingPickler.loads(ForkingPickler.dumps(sent))
    assert torch.equal(got.pixels, sent.pixels) and np.array_equal(got.units, sent.units)
    assert all(torch.equal(s.data, d) for s, d in zip(got.sources, datas))
    assert [s.encoded for s in got.sources] == [True, False]
