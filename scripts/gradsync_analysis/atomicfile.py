"""gradsync_analysis.atomicfile — a file that appears whole under its name, or not at all.

Purpose: the Python writers of results — study.h5 (studyfile), the PyTorch bridge's train and
bench files and its trace (gradsync_torch) — must leave a complete file or none, also when
the process is killed mid-write (kill -9, Slurm's --time, torchrun's SIGTERM to the other
ranks after one failed), where no exception handler runs.

Approach: the bytes go to an unnamed O_TMPFILE inode in the target folder, which is given a
name only when complete (link to "<path>.tmp.<pid>", then rename over `path`): a kill before
that leaves no file, because an unnamed inode vanishes with its last descriptor; the named
temp exists for two system calls. Where the file system has no O_TMPFILE, a named
"<path>.tmp.<pid>" is written and renamed (an error removes it; a kill may leave it, and a
resumed study removes such files, runner.py). Where the inode cannot be linked (no /proc),
its finished bytes are copied out under the temp name and renamed.
Only os, io, shutil and (for atomic_h5) h5py: both the system python and the torch venv
import it.
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil


@contextlib.contextmanager
def atomic_file(path: str, text: bool = False):
    """A file object (binary, or UTF-8 text with text=True) that becomes `path` whole when
    the block ends without an exception, or leaves nothing."""
    path = os.path.abspath(path)
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o644)
    except (AttributeError, OSError):
        fd = None
    # One cleanup for every path: whatever fails before the rename removes the named temp
    # (absent while the O_TMPFILE inode has no name yet).
    try:
        with (open(tmp, "w+b") if fd is None else os.fdopen(fd, "w+b")) as fh:
            if text:
                wrapper = io.TextIOWrapper(fh, encoding="utf-8", newline="")
                try:
                    yield wrapper
                    wrapper.flush()
                finally:
                    with contextlib.suppress(ValueError, OSError):
                        wrapper.detach()  # leaves fh open for the naming below
            else:
                yield fh
            fh.flush()
            if fd is not None:
                _name_inode(fh, d, tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def atomic_h5(path: str):
    """An h5py.File (mode "w") that becomes `path` whole when the block ends, or leaves nothing."""
    import h5py

    with atomic_file(path) as fh:
        with h5py.File(fh, "w") as f:
            yield f


def _name_inode(fh, d: str, tmp: str):
    """Gives the unnamed inode open as `fh` the name `tmp` (in folder d)."""
    # linkat(..., AT_SYMLINK_FOLLOW) names the inode; os.link only calls linkat (rather
    # than link(2), which would link the /proc symlink itself) when given a dir_fd.
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"/proc/self/fd/{fh.fileno()}", os.path.basename(tmp), dst_dir_fd=dfd, follow_symlinks=True)
    except OSError:
        # No /proc (or a file system that cannot link it): copy the finished bytes out.
        fh.seek(0)
        with open(tmp, "wb") as out:
            shutil.copyfileobj(fh, out)
    finally:
        os.close(dfd)
