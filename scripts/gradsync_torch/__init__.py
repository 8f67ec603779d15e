"""gradsync_torch — the PyTorch bridge of gradsync.

  record(ddp_model, optimizer, out=...)   DDP recorder writing a gradsync-train file (recorder.py)
  python -m gradsync_torch.bench          torch.distributed collective bench (gradsync-bench file)
  python -m gradsync_torch.codecs         the DDP hooks' codec time (JSON for calibrate --kernels)
  python -m gradsync_torch.example        small CNN trainer that records itself
  python -m gradsync_torch.overhead       the recorder's cost: plain and recorded copies in one job
  python -m gradsync_torch.native         builds the recorder's C++ DDP hook (install-deps.sh runs it)

Run through scripts/torchrun or scripts/torch-python (the project's torch venv with this
package on the path). Importing the package does not import torch; record() does.
"""


def record(model, optimizer, out, **kwargs):
    from .recorder import record as _record
    return _record(model, optimizer, out, **kwargs)


__all__ = ["record"]
