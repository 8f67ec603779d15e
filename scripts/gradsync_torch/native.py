"""gradsync_torch.native — the recorder's native DDP hook (native_hook.cpp): build and install.

    scripts/torch-python -m gradsync_torch.native      # build it now (install-deps.sh does)

Purpose: with no communication hook of the user's, the recorder times DDP's buckets with a
C++ hook that all-reduces as DDP's built-in hook does, instead of a Python hook (about
1 ms a step for the example at 1 MB buckets on a 2-core host; see native_hook.cpp).
Build: torch.utils.cpp_extension (g++, ninja and torch's headers, all present where
install-deps.sh made the venv) into $TORCH_EXTENSIONS_DIR (default
~/.cache/torch_extensions): about 30 s once; later loads reuse it (rebuilt when the source
changes). GRADSYNC_TORCH_NATIVE_HOOK=0 turns it off (the recorder then uses its Python hook,
and says so in the file: recorder_hook = python).
"""
import logging
import os
import sys

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native_hook.cpp")
NAME = "gradsync_torch_native_hook"
_module = None


def enabled():
    return os.environ.get("GRADSYNC_TORCH_NATIVE_HOOK", "1") not in ("0", "no", "off", "false")


def _built(cpp_extension):
    """Whether a build of the hook is in the extensions folder (a guess: a changed source
    rebuilds anyway)."""
    try:
        folder = cpp_extension._get_build_directory(NAME, False)
        return any(f.startswith(NAME) and f.endswith(".so") for f in os.listdir(folder))
    except Exception:
        return True


def load(rank=None):
    """The compiled module (built on first use); raises if it cannot be built or loaded."""
    global _module
    if _module is None:
        # cpp_extension warns at import that no CUDA runtime is found: irrelevant here (C++ only).
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
        from torch.utils import cpp_extension
        if rank in (None, 0) and not _built(cpp_extension):
            print("gradsync_torch: building the recorder's native DDP hook (once, about 30-40 s; "
                  "install-deps.sh builds it ahead)", file=sys.stderr, flush=True)
        _module = cpp_extension.load(name=NAME, sources=[SOURCE], extra_cflags=["-O2"], verbose=False)
    return _module


def install(model, rank):
    """Registers the timed all-reduce hook on a DDP model; its BucketLog, or None (with one
    line on stderr) when the hook is turned off or cannot be built here."""
    if not enabled():
        return None
    try:
        return load(rank).install(model.reducer, model.process_group)
    except Exception as e:  # no compiler, no headers, a torch without the C++ API: the Python hook
        reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        print(f"gradsync_torch.record: rank {rank}: native hook unavailable ({reason}); recording with the "
              f"Python hook (a Python call per bucket)", file=sys.stderr)
        return None


def main():
    import time
    t = time.perf_counter()
    load()
    print(f"gradsync_torch.native: {NAME} ready ({time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
