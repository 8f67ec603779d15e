"""torchrun with a log folder that goes away: scripts/torchrun runs this.

torch.distributed.run without --log-dir makes /tmp/torchelastic_XXXXXX (per-rank error-file
folders) for every launch and never removes it. Unless the user gives --log-dir, this runs
torchrun with a fresh folder under $TMPDIR and removes it when torchrun ends: normally, on a
failed worker (after torchrun has printed the workers' errors) and on SIGTERM / SIGINT, which
torchrun turns into exceptions. Only SIGKILL of the agent itself leaves it behind.
"""
import shutil
import sys
import tempfile


def _gives_log_dir(argv):
    for a in argv:
        if a == "-m" or a.endswith(".py") or a == "--":
            return False  # the program's own arguments follow
        if a.split("=", 1)[0] in ("--log-dir", "--log_dir"):
            return True
    return False


def main(argv):
    from torch.distributed.run import main as torchrun_main

    if _gives_log_dir(argv):
        return torchrun_main(argv)
    log_dir = tempfile.mkdtemp(prefix="gs-torchrun.")
    try:
        return torchrun_main(["--log-dir", log_dir, *argv])
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.argv[0] = "torchrun"
    main(sys.argv[1:])
