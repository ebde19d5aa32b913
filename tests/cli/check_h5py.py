"""A Trident checkpoint read with h5py alone, as docs/checkpoints.md
section documents it: root attributes, one float32 dataset per global tensor
in its global shape, and each dataset's checksum recomputed with numpy from
the documented formula.
  usage: check_h5py.py CHECKPOINT.h5 (written by the tiny CLI deck on 2 ranks at step 10)"""
import sys

import h5py
import numpy as np

M = np.uint64(0xFFFFFFFFFFFFFFFF)


def checksum(data):
    bits = data.ravel().view(np.uint32 if data.dtype.itemsize == 4 else np.uint16).astype(np.uint64)
    x = np.arange(bits.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ bits
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return int(x.sum(dtype=np.uint64) & M)


with np.errstate(over="ignore"), h5py.File(sys.argv[1], "r") as f:
    a = f.attrs
    assert a["format_version"] == 1 and a["complete"] == 1, dict(a)
    assert a["step"] == 10 and a["optimizer_steps"] == 10, (a["step"], a["optimizer_steps"])
    assert a["tokens_seen"] == 10 * 8 * 32 and a["train_window"] == 80
    assert (a["dp"], a["tp"], a["pp"], a["dp_mode"]) == (2, 1, 1, "allreduce")
    assert "[model]" in a["deck"] and a["model.d_model"] == 32 and a["train.lr"] == 0.01
    assert isinstance(f["state"], h5py.Group)
    groups = ["params", "optim/exp_avg", "optim/exp_avg_sq"]
    names = list(f["params"])
    assert names[:2] == ["wte", "wpe"] and len(names) == 2 + 2 * 12 + 2, names
    for g in groups:
        assert list(f[g]) == names, g
        for n in names:
            d = f[g][n]
            assert d.dtype == np.float32 and d.attrs["dtype"] == "f32", (g, n, d.dtype)
            got = checksum(d[...])
            assert got == int(d.attrs["checksum"]), (g, n, hex(got), hex(int(d.attrs["checksum"])))
    assert f["params/wte"].shape == (257, 32) and f["params/h.1.mlp.fc.w"].shape == (128, 32)
    assert np.all(f["params/lnf.w"][...] != 0)
print(f"ok: {3 * len(names)} datasets, every checksum recomputed by numpy matches")
