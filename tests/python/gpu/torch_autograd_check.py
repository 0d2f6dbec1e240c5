"""On a machine with torch and a GPU: Python frames captured (GIL released) from inside
autograd's backward, which for CUDA tensors runs on the autograd engine's device thread —
the thread FSDP's post-backward hooks issue their reduce-scatters from.
Run by tests/python/gpu/run.sh; exits non-zero with a message on a wrong frame."""
import sys
import threading

import torch

import lockstep_pyframes_test as m

seen = {}


class Probe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        seen["backward"] = (threading.get_ident(), m.capture(), m.capture(release_gil=False))
        return grad * 2


def post_backward(param):
    seen["hook"] = (threading.get_ident(), m.capture())


def main():
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    x = torch.ones(4, device="cuda", requires_grad=True)
    x.register_post_accumulate_grad_hook(post_backward)
    Probe.apply(x).sum().backward()
    main_ident = threading.get_ident()
    failures = []
    ident, frames, frames_gil = seen["backward"]
    print("backward thread frames:", frames)
    if ident == main_ident:
        failures.append("backward ran on the main thread; expected the autograd device thread")
    if not frames or frames[0][1] != "Probe.backward":
        failures.append("innermost frame should be Probe.backward, got %r" % (frames[:1],))
    if frames != frames_gil:
        failures.append("GIL released vs held differ: %r vs %r" % (frames, frames_gil))
    ident, frames = seen["hook"]
    print("post-accumulate-grad hook frames:", frames)
    if not frames or frames[0][1] != "post_backward":
        failures.append("innermost frame should be post_backward, got %r" % (frames[:1],))
    for f in failures:
        print("FAIL:", f)
    print("torch autograd check:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
