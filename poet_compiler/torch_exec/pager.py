"""PageFile: the flash/SD stand-in — one real file on disk that node buffers are paged to.

Each scheduling node gets its own region of the file, allocated at its first PAGE_OUT
(64-byte aligned) and reused by later page-outs of the same node. A page-out writes the
bytes of every distinct storage the node holds (``os.pwrite``: the data is handed to the
kernel before the call returns, so no user-space buffer needs flushing); a page-in reads
them back with ``os.preadv`` into freshly allocated storages and rebuilds every value
(tensors with their dtype, shape, strides and storage offset, hence the node's folded
views too; trimmed tuples of a multi-output op) on the new storages. The source tensors
are untouched: they stay usable until the program FREEs them.

I/O is synchronous, so a FENCE has nothing to wait for; with ``fsync=True`` a FENCE
that closes a window with page-outs calls ``os.fsync`` (durability point, as a device
would wait for its SD card to acknowledge the writes).

:class:`SavedTensorPager` pages the tensors autograd saves (``checkpointed()``, through
``torch.autograd.graph.saved_tensors_hooks``) to a :class:`PageFile`. On a device with DMA
its transfers run on a background thread (``os.pwrite``/``os.preadv`` release the GIL):
a page-out overlaps the forward until the next page-out or the forward's end, a page-in
starts when backward reaches the stage the schedule issues it at and is waited for when
the tensor is unpacked, its FENCE.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from poet_compiler.errors import PoetError

_ALIGN = 64


@dataclass(frozen=True)
class _TensorLayout:
    storage: int            # index into the node's storage list
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int             # storage offset, in elements


@dataclass(frozen=True)
class _Record:
    offset: int                    # start of the node's region in the file
    capacity: int                  # bytes reserved for the node
    sizes: tuple[int, ...]         # bytes of each storage, written back to back
    layout: dict[str, Any]         # name -> _TensorLayout | tuple of (_TensorLayout | None) | None


def _bytes_view(storage: torch.UntypedStorage) -> Any:
    """A zero-copy uint8 numpy view of ``storage`` (a buffer os.pwrite/preadv accept)."""
    t = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    return t.numpy()


class PageFile:
    """One page file; ``path=None`` creates a temporary file (in ``directory``) that
    :meth:`close` deletes. Counts bytes written and read."""

    def __init__(self, path: str | Path | None = None, *, directory: str | Path | None = None,
                 fsync: bool = False) -> None:
        self._owned = path is None
        try:
            if path is None:
                fd, name = tempfile.mkstemp(prefix="poet-pages-", suffix=".bin", dir=directory)
                self.path = Path(name)
                self._fd = fd
            else:
                self.path = Path(path)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            where = path if path is not None else (directory or tempfile.gettempdir())
            raise PoetError(f"page file {where}: cannot create ({exc.strerror or exc})") from None
        self.fsync = fsync
        self._records: dict[int, _Record] = {}
        self._end = 0
        self._dirty = False
        self.reset_counters()

    def reset_counters(self) -> None:
        self.bytes_written = 0
        self.bytes_read = 0
        self.n_writes = 0
        self.n_reads = 0
        self.n_fsync = 0

    def has(self, node: int) -> bool:
        return node in self._records

    # -- transfers ---------------------------------------------------------------------
    def page_out(self, node: int, values: dict[str, Any]) -> int:
        """Write the storages behind ``values`` (name -> tensor / tuple) to ``node``'s region."""
        storages: list[torch.UntypedStorage] = []
        index: dict[int, int] = {}

        def layout_of(t: torch.Tensor) -> _TensorLayout:
            s = t.untyped_storage()
            key = s.data_ptr() if s.nbytes() else -1 - len(storages)
            if key not in index:
                index[key] = len(storages)
                storages.append(s)
            return _TensorLayout(index[key], t.dtype, tuple(t.shape), tuple(t.stride()), int(t.storage_offset()))

        layout: dict[str, Any] = {}
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                layout[name] = layout_of(value)
            elif isinstance(value, (list, tuple)):
                layout[name] = tuple(layout_of(v) if isinstance(v, torch.Tensor) else None for v in value)
            else:
                layout[name] = None
        sizes = tuple(s.nbytes() for s in storages)
        total = sum(sizes)
        rec = self._records.get(node)
        if rec is None or rec.capacity < total:
            start = -(-self._end // _ALIGN) * _ALIGN
            rec = _Record(start, total, sizes, layout)
            self._end = start + total
        else:
            rec = _Record(rec.offset, rec.capacity, sizes, layout)
        pos = rec.offset
        for s in storages:
            if s.nbytes():
                self._write_all(_bytes_view(s), pos, node)
            pos += s.nbytes()
        self._records[node] = rec
        self.bytes_written += total
        self.n_writes += 1
        self._dirty = True
        return total

    def buffers(self, node: int) -> list[torch.Tensor]:
        """Fresh byte buffers for ``node``'s storages, to read it back into."""
        rec = self._records.get(node)
        if rec is None:
            raise PoetError(f"page file {self.path}: node {node} was never paged out")
        return [torch.empty(size, dtype=torch.uint8) for size in rec.sizes]

    def page_in(self, node: int, into: list[torch.Tensor] | None = None) -> dict[str, Any]:
        """Read ``node``'s last page-out into fresh storages (``into``: buffers from
        :meth:`buffers`); the rebuilt values by name."""
        bufs = self.buffers(node) if into is None else into
        rec = self._records[node]
        storages: list[torch.UntypedStorage] = []
        pos = rec.offset
        for size, buf in zip(rec.sizes, bufs):
            if size:
                self._read_all(buf.numpy(), pos, node)
            storages.append(buf.untyped_storage())
            pos += size
        self.bytes_read += sum(rec.sizes)
        self.n_reads += 1

        def build(lay: _TensorLayout) -> torch.Tensor:
            return torch.empty(0, dtype=lay.dtype).set_(storages[lay.storage], lay.offset, lay.size, lay.stride)

        out: dict[str, Any] = {}
        for name, lay in rec.layout.items():
            if isinstance(lay, _TensorLayout):
                out[name] = build(lay)
            elif isinstance(lay, tuple):
                out[name] = tuple(build(x) if x is not None else None for x in lay)
            else:
                out[name] = None
        return out

    def fence(self) -> None:
        """Complete the window's transfers: nothing to wait for (synchronous I/O); fsync
        the page-outs when asked."""
        if self.fsync and self._dirty:
            os.fsync(self._fd)
            self.n_fsync += 1
        self._dirty = False

    # -- plumbing ----------------------------------------------------------------------
    def _write_all(self, data: Any, pos: int, node: int) -> None:
        view = memoryview(data).cast("B")
        done = 0
        try:
            while done < len(view):
                done += os.pwrite(self._fd, view[done:], pos + done)
        except OSError as exc:
            raise PoetError(f"page file {self.path}: writing node {node} failed ({exc.strerror or exc})") from None

    def _read_all(self, data: Any, pos: int, node: int) -> None:
        view = memoryview(data).cast("B")
        done = 0
        try:
            while done < len(view):
                got = os.preadv(self._fd, [view[done:]], pos + done)
                if got == 0:
                    raise PoetError(f"page file {self.path}: node {node} is truncated on disk")
                done += got
        except OSError as exc:
            raise PoetError(f"page file {self.path}: reading node {node} failed ({exc.strerror or exc})") from None

    @property
    def size_bytes(self) -> int:
        """Bytes the file spans (regions of every node paged out so far)."""
        return self._end

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None  # type: ignore[assignment]
            if self._owned:
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> PageFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: never leave a temporary page file behind
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class _Handle:
    """What autograd holds for a paged saved tensor: the node, which of its storages, and
    the view's layout."""

    __slots__ = ("__weakref__", "dtype", "index", "node", "offset", "size", "stride")

    def __init__(self, node: int, index: int, t: torch.Tensor) -> None:
        self.node = node
        self.index = index
        self.dtype = t.dtype
        self.size = tuple(t.shape)
        self.stride = tuple(t.stride())
        self.offset = int(t.storage_offset())


class _Pending:
    """A tensor packed while a paged node's op runs, before the pager knows whether it is
    that node's output (an op that saves its own result packs it before it returns)."""

    __slots__ = ("__weakref__", "handle", "tensor")

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor: torch.Tensor | None = t
        self.handle: _Handle | None = None


class SavedTensorPager:
    """Saved-tensor hooks that page the storages of chosen nodes to ``pages``.

    The forward marks a paged node's output with :meth:`begin` / :meth:`end` around its op;
    :meth:`pack` turns every tensor autograd saves on such a storage into a handle (the
    storage is written once, at :meth:`end`), :meth:`unpack` reads the storage back (once
    per step; it is shared by the node's handles until the last one is unpacked).
    ``dma``: transfers run on a background thread (see the module docstring);
    :meth:`prefetch` starts a read ahead of its unpack.
    """

    def __init__(self, pages: PageFile, *, dma: bool) -> None:
        self.pages = pages
        self.dma = dma
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(1, thread_name_prefix="poet-pager") if dma else None
        self.active = False
        self.reset()

    def reset(self) -> None:
        """Forget the previous step (called at the start of every forward). Refused while the
        previous forward's graph still holds paged handles: its pages would be overwritten."""
        alive = getattr(self, "alive", None)
        if alive is not None and len(alive):
            raise PoetError("checkpointed(): the previous forward's graph still holds tensors paged to "
                            f"{self.pages.path}; call backward() on it (or drop its outputs) before the next forward")
        self.alive: weakref.WeakSet[Any] = weakref.WeakSet()
        self.generation = getattr(self, "generation", 0) + 1
        self.node_of: dict[int, tuple[int, int]] = {}   # storage data_ptr -> (paged node, storage index)
        self.window: list[_Pending] | None = None
        self.handles: dict[int, int] = {}          # node -> handles not unpacked yet
        self.loaded: dict[int, Any] = {}           # node -> its storages read back (or a Future of them)
        self.writing: tuple[Future, dict[str, torch.Tensor]] | None = None
        self.n_out = self.n_in = 0

    # -- forward ------------------------------------------------------------------------
    def begin(self) -> None:
        if self.active:
            self.window = []

    def end(self, node: int, values: tuple[torch.Tensor, ...]) -> None:
        """``values`` are the tensors paged node ``node`` holds: write their storages, turn
        the handles packed during its op into paged ones."""
        if not self.active:
            return
        bases: dict[str, torch.Tensor] = {}
        for index, value in enumerate(values):
            storage = value.untyped_storage()
            ptr = storage.data_ptr()
            self.node_of[ptr] = (node, index)
            # The address may serve another tensor once this storage is freed: forget it then.
            weakref.finalize(storage, self._forget, ptr, node, self.generation)
            bases[f"s{index}"] = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
        self._write(node, bases)
        window, self.window = self.window or [], None
        for p in window:
            t = p.tensor
            if t is None:
                continue
            where = self.node_of.get(t.untyped_storage().data_ptr())
            if where is not None and where[0] == node:
                p.handle = _Handle(node, where[1], t)
                self.alive.add(p.handle)
                p.tensor = None
                self.handles[node] = self.handles.get(node, 0) + 1

    def _forget(self, ptr: int, node: int, generation: int) -> None:
        got = self.node_of.get(ptr)
        if generation == self.generation and got is not None and got[0] == node:
            del self.node_of[ptr]

    def _write(self, node: int, bases: dict[str, torch.Tensor]) -> None:
        self.n_out += 1
        if self._pool is None:
            self.pages.page_out(node, bases)
            return
        self.fence()                                  # one page-out in flight
        # The pager thread gets the storages in a box it empties before it returns, so
        # the last reference is this thread's, dropped at the fence: a storage is freed
        # where the plan frees it, on the thread whose allocations the profiler records.
        self.writing = (self._pool.submit(self._write_boxed, node, [bases]), bases)

    def _write_boxed(self, node: int, box: list[dict[str, torch.Tensor]]) -> None:
        self.pages.page_out(node, box.pop())

    def fence(self) -> None:
        """Wait for the page-out in flight (the forward's end calls it too)."""
        w, self.writing = self.writing, None
        if w is not None:
            w[0].result()

    def pack(self, t: torch.Tensor) -> Any:
        where = self.node_of.get(t.untyped_storage().data_ptr())
        if where is not None:
            node = where[0]
            self.handles[node] = self.handles.get(node, 0) + 1
            h = _Handle(node, where[1], t)
            self.alive.add(h)
            return h
        if self.window is not None:
            p = _Pending(t)
            self.window.append(p)
            return p
        return t

    # -- backward -----------------------------------------------------------------------
    def prefetch(self, nodes: tuple[int, ...]) -> None:
        """Start reading ``nodes`` back (a pre-hook of the autograd node at their stage)."""
        for node in nodes:
            if node not in self.loaded and self.handles.get(node) and self._pool is not None:
                self.n_in += 1
                # Allocated here, read there: the buffers are this thread's allocations.
                self.loaded[node] = self._pool.submit(self._read, node, self.pages.buffers(node))

    def _read(self, node: int, into: list[torch.Tensor] | None = None) -> list[torch.UntypedStorage]:
        values = self.pages.page_in(node, into)
        return [values[f"s{k}"].untyped_storage() for k in range(len(values))]

    def unpack(self, h: Any) -> torch.Tensor:
        if isinstance(h, torch.Tensor):
            return h
        if isinstance(h, _Pending):
            if h.handle is None:
                assert h.tensor is not None
                return h.tensor
            h = h.handle
        node = h.node
        storages = self.loaded.get(node)
        if storages is None:
            self.n_in += 1
            storages = self._read(node)
        elif isinstance(storages, Future):
            storages = storages.result()            # the FENCE of a prefetch
        left = self.handles.get(node, 1) - 1
        if left > 0:
            self.handles[node] = left
            self.loaded[node] = storages
        else:
            self.handles.pop(node, None)
            self.loaded.pop(node, None)
        return torch.empty(0, dtype=h.dtype).set_(storages[h.index], h.offset, h.size, h.stride)

    def close(self) -> None:
        if self._pool is not None:
            self.fence()
            self._pool.shutdown(wait=True)
            self._pool = None


__all__ = ["PageFile", "SavedTensorPager"]
