"""What llama.cpp placed where, as llama.cpp itself reports it.

Issue 48: "`device` and the offloaded layer count come from what llama.cpp reports". The
C API has no call for either, but llama.cpp logs both as it allocates, once per buffer:

    load_tensors: offloaded 17/17 layers to GPU
    load_tensors:        CUDA0 model buffer size =   834.12 MiB
    load_tensors:   CPU_Mapped model buffer size =   106.88 MiB
    llama_kv_cache:      CUDA0 KV buffer size =   128.00 MiB
    llama_context:  CUDA_Host  output buffer size =     0.19 MiB
    sched_reserve:       CUDA0 compute buffer size =   117.00 MiB

`LogTap` takes over llama.cpp's log callback (llama-cpp-python's own prints to stderr;
this one does the same when asked) and hands each line to the `Recording` the calling
thread opened, if any: the main thread records the model's load, each worker thread the
making of its context. A buffer is on a device unless its name says host memory (`CPU`,
`CPU_Mapped`, `CPU_REPACK`, `CUDA_Host`, `Vulkan_Host`, ...). Pure parsing apart from
`LogTap.install`.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_BUFFER = re.compile(
    r"^\S+:\s+(?P<name>\S+)\s+(?P<kind>model|KV|RS|output|compute|LoRA)\s+buffer size\s*=\s*"
    r"(?P<mib>[0-9.]+) MiB"
)
_OFFLOADED = re.compile(r"offloaded (?P<done>\d+)/(?P<of>\d+) layers to GPU")
MIB = 1 << 20
#: ggml's log level of an error (printed even when not verbose, as llama-cpp-python does).
_ERROR = 3


def is_host_buffer(name: str) -> bool:
    """A buffer in host memory: the CPU's own, or pinned host memory of a GPU backend."""
    return name.upper().startswith("CPU") or name.lower().endswith("_host")


@dataclass
class Recording:
    """What llama.cpp logged about its buffers while this recording was open."""

    #: (buffer name, kind, bytes) in the order logged.
    buffers: list[tuple[str, str, int]] = field(default_factory=list)
    #: "offloaded k/n layers to GPU", as (k, n); None when llama.cpp did not say (a
    #: library without GPU offload logs no such line).
    offloaded: tuple[int, int] | None = None
    _partial: str = ""

    def feed(self, text: str) -> None:
        """One piece of a log line (llama.cpp may write a line in pieces)."""
        self._partial += text
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            self.line(line)

    def line(self, line: str) -> None:
        found = _BUFFER.search(line)
        if found is not None:
            size = int(float(found["mib"]) * MIB)
            self.buffers.append((found["name"], found["kind"], size))
            return
        layers = _OFFLOADED.search(line)
        if layers is not None:
            self.offloaded = (int(layers["done"]), int(layers["of"]))

    def device_bytes(self, kinds: tuple[str, ...] | None = None) -> int:
        """Bytes of the buffers on a device (of `kinds` only, when given)."""
        return sum(
            n
            for name, kind, n in self.buffers
            if not is_host_buffer(name) and (kinds is None or kind in kinds)
        )

    def host_bytes(self) -> int:
        return sum(n for name, _, n in self.buffers if is_host_buffer(name))

    def by_device(self) -> dict[str, int]:
        """Bytes a device (buffer name) holds, devices only."""
        out: dict[str, int] = {}
        for name, _, n in self.buffers:
            if not is_host_buffer(name):
                out[name] = out.get(name, 0) + n
        return out


class LogTap:
    """llama.cpp's log callback for this process (install once, on the main thread)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.verbose = False
        self._callback: Any = None

    def install(self, *, verbose: bool) -> None:
        """Route llama.cpp's and ggml's log here (replacing llama-cpp-python's)."""
        import llama_cpp.llama_cpp as C

        self.verbose = verbose

        @C.llama_log_callback  # type: ignore[untyped-decorator]
        def on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            self.on_text(level, text.decode("utf-8", "replace") if text else "")

        self._callback = on_log  # kept alive: llama.cpp holds only its address
        C.llama_log_set(on_log, ctypes.c_void_p(0))

    def on_text(self, level: int, text: str) -> None:
        """One log call from llama.cpp, on the thread that logged it."""
        recording: Recording | None = getattr(self._local, "recording", None)
        if recording is not None:
            recording.feed(text)
        if self.verbose or level == _ERROR:
            sys.stderr.write(text)
            sys.stderr.flush()

    @contextlib.contextmanager
    def record(self) -> Iterator[Recording]:
        """Collect what llama.cpp logs on this thread until the block ends."""
        recording = Recording()
        previous = getattr(self._local, "recording", None)
        self._local.recording = recording
        try:
            yield recording
        finally:
            recording.feed("\n")
            self._local.recording = previous


#: The process's tap (`native.init_backend` installs it).
TAP = LogTap()
