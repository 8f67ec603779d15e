"""Where the programs and scripts are, and how to call them."""
from __future__ import annotations

import json
import os
import shlex
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class ToolError(Exception):
    pass


def bin_dir(explicit: str | None = None) -> str:
    """--bin, else $GRADSYNC_BIN, else <repo>/build/bin (what scripts/build.sh makes)."""
    return os.path.abspath(explicit or os.environ.get("GRADSYNC_BIN") or os.path.join(REPO, "build", "bin"))


def program(name: str, bindir: str) -> str:
    return os.path.join(bindir, name)


def need(path: str, what: str = "") -> str:
    if not os.access(path, os.X_OK):
        raise ToolError(f"{path} not found or not executable{(' (' + what + ')') if what else ''}; "
                        "build it (scripts/build.sh) or point --bin / GRADSYNC_BIN at the build's bin folder")
    return path


def need_torch_venv() -> str:
    """The PyTorch venv scripts/torchrun and scripts/torch-python run ($GRADSYNC_TORCH_VENV,
    default <repo>/.venv-torch): checked once before a torch study's points, so a missing
    one is one line instead of every point failing with it."""
    venv = os.environ.get("GRADSYNC_TORCH_VENV") or os.path.join(REPO, ".venv-torch")
    if not os.access(os.path.join(venv, "bin", "python"), os.X_OK):
        raise ToolError(f"no PyTorch venv at {venv} (runtime = \"torch\"); run: GRADSYNC_DEPS=torch "
                        "scripts/install-deps.sh, or point GRADSYNC_TORCH_VENV at one")
    return venv


def quote(argv) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def run_model(bindir: str, args: list, log_path: str | None = None, want_json: bool = False):
    """Runs gradsync-model ARGS; returns (stdout, parsed JSON or None). Raises ToolError with
    its message on failure. The command line and both streams go to log_path when given."""
    exe = need(program("gradsync-model", bindir), "gradsync-model")
    argv = [exe] + [str(a) for a in args]
    p = subprocess.run(argv, capture_output=True, text=True)
    if log_path:
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "a") as fh:
            fh.write(f"$ {quote(argv)}\n{p.stdout}{p.stderr}# exit {p.returncode}\n")
    if p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
        raise ToolError(f"gradsync-model {args[0]} failed (exit {p.returncode}): "
                        f"{msg[-1] if msg else 'no message'}")
    data = None
    if want_json:
        try:
            data = json.loads(p.stdout)
        except json.JSONDecodeError as e:
            raise ToolError(f"gradsync-model {args[0]} --json printed no JSON: {e}")
    return p.stdout, data
