"""gradsync_torch.native — the recorder's native DDP hook (native_hook.cpp): build and install.

    scripts/torch-python -m gradsync_torch.native      # build it now (install-deps.sh does)

Purpose: with no communication hook of the user's, the recorder times DDP's buckets in C++
instead of with a Python hook (about 1 ms a step for the example at 1 MB buckets on a
2-core host; see native_hook.cpp): where the process group takes collective hooks (torch
2.15's ProcessGroup.register_pre_hook), by observing DDP's own all-reduce there, so DDP runs
exactly as without the recorder (recorder_hook = pg in the file); elsewhere with a C++
communication hook that all-reduces as DDP's built-in hook does (recorder_hook = native).
Build: torch.utils.cpp_extension (g++, ninja and torch's headers, all present where
install-deps.sh made the venv) into $TORCH_EXTENSIONS_DIR (default
~/.cache/torch_extensions): about 30 s once; later loads reuse it (rebuilt when the source
changes). GRADSYNC_TORCH_NATIVE_HOOK=0 turns it off (the recorder then uses its Python hook,
and says so in the file: recorder_hook = python); GRADSYNC_TORCH_NATIVE_HOOK=hook asks for
the C++ communication hook where the process-group hooks exist (for A/B runs).
"""
import itertools
import logging
import os
import sys

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native_hook.cpp")
NAME = "gradsync_torch_native_hook"
_module = None


# The recorder's process-group hook ids: c10d keys hooks by id; these stay clear of small ids.
HOOK_ID_BASE = 0x67727364 << 16


def mode():
    """'auto' (process-group hooks where torch has them, else the C++ comm hook), 'hook'
    (the C++ comm hook) or 'off' (the Python hook), from GRADSYNC_TORCH_NATIVE_HOOK."""
    v = os.environ.get("GRADSYNC_TORCH_NATIVE_HOOK", "1").strip().lower()
    if v in ("0", "no", "off", "false"):
        return "off"
    return "hook" if v == "hook" else "auto"


def enabled():
    return mode() != "off"


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


_next_id = itertools.count(1)


def install(model, rank):
    """Times a DDP model's buckets in C++: (kind, BucketLog, observer) with kind "pg" (DDP's
    own all-reduce observed on its process group; observer.detach() ends it) or "native" (a
    timed all-reduce comm hook; observer None), or None (with one line on stderr) when
    turned off or it cannot be built here."""
    if not enabled():
        return None
    try:
        module = load(rank)
        if mode() == "auto" and hasattr(module, "install_observer") and hasattr(model.process_group,
                                                                                 "register_pre_hook"):
            log, observer = module.install_observer(model.process_group, HOOK_ID_BASE + next(_next_id))
            return "pg", log, observer
        return "native", module.install(model.reducer, model.process_group), None
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
