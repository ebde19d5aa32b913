"""Running one layout with trident and comparing it with the serial run:
per-step loss and grad_norm from the metrics JSONL, then every tensor of the
checkpoint written after the last step."""
import json
import os
import shutil
import subprocess

import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "perf"))
import run_compare  # noqa: E402

# Tolerances, as worst relative errors over the run, per precision setting.
# Each is set a few times above the noise floor measured over the whole matrix
# (--all), where the floor is what a correct change of summation order alone
# gives: one rank with 2-4 micro-batches instead of 1, tensor-parallel partial
# sums, and in 16 bits their different rounding.
#   loss, grad_norm: every step. fp32 floor 4.2e-9 / 1.3e-7; the grad_norm
#   error ZeRO-2/3 + SP once had (6e-4) fails 1e-6 by 600x.
#   state: each kind of state (parameters, each Adam moment, fp32 masters) as
#   one vector over the whole model: |a - b| / |a|. fp32 floor 6e-7.
#   element: max |a - b| over a tensor's max |a|, the worst tensor. It catches
#   a bug confined to one small tensor, which the state norm would dilute.
#   Adam gives every element a step of order lr whatever its gradient, so an
#   element whose gradient nearly cancels carries rounding noise at the
#   tensor's scale: fp32 floor 1.1e-3 on oneDNN's GEMMs (4e-4 on OpenBLAS's;
#   always h.6.mlp.proj.w, a row-parallel weight under tp 2), 1.9e-5 per
#   tensor norm-wise; the SP bug gave ~0.7.
#   16 bits: grad_norm is the sharp test (the bug gave 2.5e-3 to 5e-3). State
#   floors: bf16 1.2e-3, with 16-bit gradients 3.1e-3; fp16 2.9e-4 and 5e-4.
TOLERANCE = {
    "fp32": dict(loss=1e-6, grad_norm=1e-6, state=1e-5, element=3e-3),
    "bf16": dict(loss=5e-5, grad_norm=1e-3, state=1e-2, element=0.4),
    "bf16-reduce": dict(loss=5e-5, grad_norm=1.5e-3, state=1e-2, element=0.4),
    "fp16": dict(loss=5e-5, grad_norm=1e-3, state=5e-3, element=0.4),
    "fp16-reduce": dict(loss=5e-5, grad_norm=1e-3, state=5e-3, element=0.4),
    # The same layout with its optimizer state offloaded: bit for bit.
    "exact": dict(loss=0.0, grad_norm=0.0, state=0.0, element=0.0),
    # The Llama model (llama.py) in bf16. Its floor over --all: loss 5.7e-5
    # (tp 4 with SP), grad_norm 1.8e-3 (every tp 2 layout: one order of partial
    # sums), state 4.4e-3. Not a layout rounding differently: step 1, at equal weights,
    # agrees within 5e-5 in grad_norm; the spread is Adam's noise in steps 2-3
    # (at seeds 7 and 99, tp 2 and tp 4 give grad_norm 4e-4 to 1e-2, and GPT-2
    # itself a loss of 8.5e-5, beyond its 5e-5).
    "llama-bf16": dict(loss=1e-4, grad_norm=4e-3, state=1e-2, element=0.4),
}
STEPS_KEY = "step"


def tolerance(precision):
    return TOLERANCE[precision]


def tolerance_key(precision, model):
    """The model's own tolerance for this precision where it has one."""
    return f"{model}-{precision}" if f"{model}-{precision}" in TOLERANCE else precision


def launcher_env(mpiexec):
    """The environment a launcher needs: Open MPI's mpirun refuses root and
    more ranks than cores unless told; MPICH's Hydra needs nothing."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    version = subprocess.run([mpiexec.split()[0], "--version"], capture_output=True, text=True)
    if "Open MPI" in version.stdout + version.stderr:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none")
    return env


def default_mpiexec():
    """mpirun, with --oversubscribe where it is Open MPI's (the matrix runs up
    to 8 ranks on however many cores there are)."""
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True)
    return "mpirun --oversubscribe" if "Open MPI" in version.stdout else "mpirun"


def run_trident(mpiexec, env, binary, deck, data, workdir, rank_count, sets, log, extra=()):
    """Trains and returns (metrics records, checkpoint path) or raises RunFailed.
    mpiexec: the launcher and its options, as one string; extra: more options
    of train (--resume PATH)."""
    if os.path.exists(workdir):
        shutil.rmtree(workdir)
    os.makedirs(workdir)
    metrics = os.path.join(workdir, "metrics.jsonl")
    cmd = mpiexec.split() + ["-n", str(rank_count), binary, "train", deck,
                             "--set", f"data.train={data}", "--set", f"checkpoint.dir={workdir}/ckpt",
                             "--set", f"output.metrics={metrics}"]
    for s in sets:
        cmd += ["--set", s]
    cmd += list(extra)
    with open(log, "w") as out:
        out.write(" ".join(cmd) + "\n")
        out.flush()
        try:
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  timeout=120).returncode
        except subprocess.TimeoutExpired:
            raise RunFailed(f"timed out after 120 s (log {log})")
    if code != 0:
        raise RunFailed(f"trident exited {code} (log {log})")
    with open(metrics) as f:
        records = [json.loads(line) for line in f if line.strip()]
    ckpts = sorted(p for p in os.listdir(f"{workdir}/ckpt") if p.endswith(".h5"))
    return records, os.path.join(workdir, "ckpt", ckpts[-1])


def same_checkpoints(dir_a, dir_b):
    """Reasons the checkpoints of two runs differ (every file, every dataset
    and attribute bit for bit, the deck's --set checkpoint.* lines aside);
    empty when they are the same."""
    names = sorted(p for p in os.listdir(dir_a) if p.endswith(".h5"))
    if names != sorted(p for p in os.listdir(dir_b) if p.endswith(".h5")):
        return [f"checkpoints {names} vs {sorted(os.listdir(dir_b))}"]
    why = []
    for name in names:
        line, differ = run_compare.checkpoint_differences(os.path.join(dir_a, name),
                                                          os.path.join(dir_b, name), True)
        if differ:
            why.append(f"{name}: {line}")
    return why


class RunFailed(Exception):
    pass


def _decode(d):
    """A checkpoint dataset as float64, whatever its stored type."""
    kind = d.attrs.get("dtype", "f32")
    kind = kind.decode() if isinstance(kind, bytes) else kind
    raw = d[...]
    if kind == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if kind in ("f16", "fp16"):
        return raw.view(np.float16).astype(np.float64)
    return raw.astype(np.float64)


def read_tensors(path):
    """{"params/wte": array, ...} for params, Adam moments and fp32 masters.
    The key slice of each attn.qkv.b is left out: its gradient is exactly zero
    in exact arithmetic, so Adam turns rounding noise into lr-sized steps that
    differ with every summation order (docs/testing.md)."""
    out = {}
    with h5py.File(path, "r") as f:
        for group in ("params", "master", "optim/exp_avg", "optim/exp_avg_sq"):
            if group not in f:
                continue
            for name, d in f[group].items():
                x = _decode(d)
                if name.endswith("attn.qkv.b"):
                    x = np.delete(x, 1, axis=0)
                out[f"{group}/{name}"] = x
    return out


def compare_resumed(ref, got, precision, saved_step):
    """compare() for a run resumed from the checkpoint of saved_step: its
    steps against the reference's after that one (no more, no fewer), its
    final state against the reference's."""
    ref_metrics, ref_tensors = ref
    return compare(([r for r in ref_metrics if r[STEPS_KEY] > saved_step], ref_tensors), got,
                   precision)


def compare(ref, got, precision):
    """Worst relative errors and the verdict: dict(loss, grad_norm, tensor,
    where, ok, why)."""
    tol = tolerance(precision)
    (ref_metrics, ref_tensors), (metrics, tensors) = ref, got
    res = dict(loss=0.0, grad_norm=0.0, state=0.0, element=0.0, where="", where_element="", why=[])
    if [r[STEPS_KEY] for r in metrics] != [r[STEPS_KEY] for r in ref_metrics]:
        res["why"].append("steps differ from the serial run")
    for a, b in zip(ref_metrics, metrics):
        for key in ("loss", "grad_norm"):
            if a[key] is None or b[key] is None:  # fp16's overflowed steps: no norm (null)
                if (a[key] is None) != (b[key] is None):
                    res["why"].append(f"{key} at step {a[STEPS_KEY]}: {b[key]!r} vs {a[key]!r}")
                continue
            err = abs(b[key] - a[key]) / max(abs(a[key]), 1e-30)
            if err > res[key]:
                res[key] = err
                if err > tol[key]:
                    res["why"].append(f"{key} at step {a[STEPS_KEY]}: {b[key]!r} vs {a[key]!r}")
        if a.get("skipped") != b.get("skipped"):
            res["why"].append(f"skipped at step {a[STEPS_KEY]}: {b.get('skipped')} vs {a.get('skipped')}")
    if set(ref_tensors) != set(tensors):
        res["why"].append(f"checkpoint datasets differ: {sorted(set(ref_tensors) ^ set(tensors))[:4]}")
    sums = {}  # state kind -> (sum of squared differences, sum of squares)
    for name in sorted(set(ref_tensors) & set(tensors)):
        a, b = ref_tensors[name], tensors[name]
        if a.shape != b.shape:
            res["why"].append(f"{name}: shape {b.shape} vs {a.shape}")
            continue
        kind = name.rsplit("/", 1)[0]
        d, n = sums.get(kind, (0.0, 0.0))
        sums[kind] = (d + float(np.sum((b - a) ** 2)), n + float(np.sum(a ** 2)))
        err = float(np.max(np.abs(b - a)) / max(float(np.max(np.abs(a))), 1e-30))
        if err > res["element"]:
            res["element"], res["where_element"] = err, name
    for kind, (d, n) in sums.items():
        err = (d / max(n, 1e-300)) ** 0.5
        if err > res["state"]:
            res["state"], res["where"] = err, kind
    if res["state"] > tol["state"]:
        res["why"].append(f"{res['where']}: {res['state']:.2e} of its norm")
    if res["element"] > tol["element"]:
        res["why"].append(f"{res['where_element']}: an element {res['element']:.2e} of its max abs value")
    res["why"] = [w for i, w in enumerate(res["why"]) if w not in res["why"][:i]]
    res["ok"] = not res["why"]
    return res
