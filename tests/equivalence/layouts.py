"""The axes of the layout-equivalence matrix, how a layout becomes deck
overrides, and the layouts run beside the covering subset (cover.py): the
past regressions, offload, async checkpoint, post-validation and context
parallelism rows, and the bounded whole matrix (--all).

A layout is a tuple with one value per axis, in AXES order. Whether it is valid
is never decided here: callers ask `trident check` (see selection.py)."""
import itertools

AXES = [
    ("dp", [1, 2, 4]),
    ("tp", [1, 2, 4]),
    ("pp", [1, 2, 4]),
    ("schedule", ["naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"]),  # interleaved: v 2; zb-v: 2 chunks (the deck sets them)
    ("sp", [False, True]),
    ("zero", [0, 1, 2, 3]),
    ("dp_mode", ["allreduce", "gather"]),
    ("micro_batches", [1, 2, 3, 4]),  # per rank per step; train.micro_batch = batch / (dp * this)
    ("recompute", ["none", "selective", "full", "full-unpartitioned"]),
    ("precision", ["fp32", "bf16", "bf16-reduce", "fp16", "fp16-reduce"]),  # -reduce: 16-bit grads
    ("persistence", ["low", "high"]),  # zero.persistence_threshold: every unit / no unit sharded
    ("bucket", ["large", "small"]),    # parallel.bucket_mb: one bucket / one per few tensors
    # Last and outside the pairwise cover: offload_pairs() runs each setting
    # beside the same layout without offload, to be equal bit for bit.
    # cpu, nvme: offload.optimizer; params-H[+O]: offload.params = H (and optimizer = O);
    # cpu-split: optimizer = cpu with offload.ratio 0.5 (half the shard's state on the device)
    ("offload", ["none", "cpu", "nvme", "cpu-split", "params-cpu", "params-nvme",
                 "params-nvme+nvme", "params-cpu+nvme"]),
    # Outside the cover too: async_pairs() runs checkpoints every 2 steps
    # written in the background beside the same layout saving synchronously.
    ("checkpoints", ["end", "every2", "every2-async"]),
    # Outside the cover too: post_validation_runs() (the optimizer's step).
    # clip-some: grad_clip 1.4, so steps 1-3 clip and 4-5 do not, and fp16
    # starts at a loss scale of 1e9 that overflows steps 1-2; pv-clip-some:
    # the same with parallel.post_validation on.
    ("step", ["sync", "clip-some", "pv-clip-some"]),
    # Context parallelism, outside the cover too: context_layouts() crosses it
    # with the other axes, each against the serial run.
    ("cp", [1, 2, 4]),
    # The model: deck.toml's GPT-2, or the Llama configuration (MODEL_KEYS);
    # llama.py chooses its layouts, each against the serial Llama run.
    ("model", ["gpt2", "llama"]),
]
NAMES = [a for a, _ in AXES]
COVERED = len(AXES) - 5  # the axes whose value pairs the CI subset covers
INDEX = {a: i for i, a in enumerate(NAMES)}
DEFAULT = dict(dp=1, tp=1, pp=1, schedule="1f1b", sp=False, zero=0, dp_mode="allreduce",
               micro_batches=1, recompute="none", precision="fp32", persistence="low",
               bucket="large", offload="none", checkpoints="end", step="sync", cp=1,
               model="gpt2")
MAX_RANKS = 8
SWAP_DIR = "/tmp"  # offload.nvme_path of nvme layouts (run_matrix sets a scratch directory)
EXTRA_SETS = []  # --set options every run adds (run_matrix --set), e.g. system.device=cuda

# Llama's whole configuration (RoPE, RMSNorm, SwiGLU, no biases, untied) with 8
# query heads sharing 4 key/value heads, so tp 4 still gives each rank one of
# its own; heads 8 wide; ffn_hidden 176 (8/3 d_model rounded up to 8, as Llama).
MODEL_KEYS = {
    "gpt2": [],
    "llama": ["model.family=llama", "model.d_model=64", "model.heads=8", "model.kv_heads=4",
              "model.ffn_hidden=176"],
}

PRECISION_KEYS = {
    "fp32": ["precision.dtype=fp32"],
    "bf16": ["precision.dtype=bf16"],
    "bf16-reduce": ["precision.dtype=bf16", "precision.reduce_dtype=bf16"],
    "fp16": ["precision.dtype=fp16"],
    "fp16-reduce": ["precision.dtype=fp16", "precision.reduce_dtype=fp16"],
}


def make(**values):
    d = dict(DEFAULT, **values)
    return tuple(d[a] for a in NAMES)


def with_values(layout, values):
    """The layout with axis i set to values[i] for each i given."""
    return tuple(values.get(i, x) for i, x in enumerate(layout))


def get(layout, axis):
    return layout[INDEX[axis]]


def ranks(layout):
    return get(layout, "dp") * get(layout, "tp") * get(layout, "pp") * get(layout, "cp")


def overrides(layout, batch):
    """The --set list that trains this layout (the precision's keys included)."""
    v = dict(zip(NAMES, layout))
    per_rank = batch / (v["dp"] * v["micro_batches"])
    # A fractional micro_batch is passed as it is, for the validator to refuse.
    micro = int(per_rank) if per_rank == int(per_rank) else per_rank
    out = [f"parallel.dp={v['dp']}", f"parallel.tp={v['tp']}", f"parallel.pp={v['pp']}",
           f"parallel.cp={v['cp']}",
           f"parallel.schedule={v['schedule']}",
           f"parallel.virtual_stages={2 if v['schedule'] == 'interleaved' else 1}",
           f"parallel.sequence_parallel={'true' if v['sp'] else 'false'}",
           f"zero.stage={v['zero']}", f"parallel.dp_mode={v['dp_mode']}",
           f"train.micro_batch={micro}",
           f"train.recompute={v['recompute'].split('-')[0]}",
           f"train.partition_activations={'false' if v['recompute'].endswith('unpartitioned') else 'true'}",
           # 0: every unit is sharded (ZeRO's real path: this model's blocks are all
           # below the product's default threshold); 10^9: every unit stays whole.
           f"zero.persistence_threshold={1000000000 if v['persistence'] == 'high' else 0}",
           # 1 KB buckets hold a few small tensors each; 64 MB holds the whole model.
           f"parallel.bucket_mb={0.001 if v['bucket'] == 'small' else 64}"]
    if v["offload"] != "none":  # 8 KiB blocks: the swap streams many, the queue stays full
        o = v["offload"]
        params, _, optimizer = o[len("params-"):].partition("+") if o.startswith("params-") \
            else ("none", "", o)
        if optimizer == "cpu-split":
            optimizer = "cpu"
            out.append("offload.ratio=0.5")
        out += [f"offload.params={params}", f"offload.optimizer={optimizer or 'none'}",
                f"offload.nvme_path={SWAP_DIR}", "offload.block_mb=0.0078125"]
    if v["checkpoints"] != "end":  # every checkpoint kept, for async_pairs
        out += ["checkpoint.every=2", "checkpoint.keep=0",
                f"checkpoint.async={'true' if v['checkpoints'].endswith('async') else 'false'}"]
    out += STEP_KEYS[v["step"]](v["precision"])
    return out + PRECISION_KEYS[v["precision"]] + MODEL_KEYS[v["model"]] + EXTRA_SETS


def describe(layout):
    """A compact name: the grid and schedule always, other axes when not default."""
    v = dict(zip(NAMES, layout))
    s = f"{'llama ' if v['model'] == 'llama' else ''}dp{v['dp']} tp{v['tp']} pp{v['pp']}" + \
        (f" cp{v['cp']}" if v["cp"] > 1 else "") + f" {v['schedule']}"
    extra = {"sp": "sp" if v["sp"] else None, "zero": f"z{v['zero']}" if v["zero"] else None,
             "dp_mode": v["dp_mode"] if v["dp_mode"] != "allreduce" else None,
             "micro_batches": f"m{v['micro_batches']}",
             "recompute": f"rc:{v['recompute']}" if v["recompute"] != "none" else None,
             "precision": v["precision"] if v["precision"] != "fp32" else None,
             "persistence": "persist:high" if v["persistence"] == "high" else None,
             "bucket": "bucket:small" if v["bucket"] == "small" else None,
             "offload": f"offload:{v['offload']}" if v["offload"] != "none" else None,
             "checkpoints": f"ckpt:{v['checkpoints']}" if v["checkpoints"] != "end" else None,
             "step": v["step"] if v["step"] != "sync" else None}
    return " ".join([s] + [x for x in extra.values() if x])


# --- the optimizer step: post-validation -------------------------------------

def _clip_some(precision):
    fp16 = ["precision.initial_scale=1e9", "precision.hysteresis=1"] if "fp16" in precision else []
    return ["train.grad_clip=1.4"] + fp16


STEP_KEYS = {
    "sync": lambda precision: [],
    "clip-some": _clip_some,
    "pv-clip-some": lambda precision: _clip_some(precision) + ["parallel.post_validation=true"],
}


def post_validation_runs():
    """(layout, reference, tolerance) for every zero-bubble schedule in fp32,
    bf16 and fp16, with clipping on some steps and (fp16) overflow on others:
    the synchronous step and post-validation each against the serial run, and
    post-validation against the synchronous step bit for bit (its rolled-back
    steps redone exactly). Plus dp2 tp2 pp2 bf16 zb-v, whose larger send pool
    once deadlocked, gather mode, and zb-h2 and zb-v at pp 4."""
    out = []
    for schedule in ("zb-h1", "zb-h2", "zb-v"):
        for precision in ("fp32", "bf16", "fp16"):
            serial = make(precision=precision, step="clip-some")
            sync = make(pp=2, schedule=schedule, micro_batches=4, precision=precision,
                        step="clip-some", dp=2 if precision == "bf16" else 1)
            pv = with_values(sync, {INDEX["step"]: "pv-clip-some"})
            out += [(sync, serial, precision), (pv, serial, precision), (pv, sync, "exact")]
    # Gather mode: every data rank steps ahead (the root's broadcast is a collective).
    for grid in (dict(dp=2, tp=2, pp=2, schedule="zb-v"),
                 dict(dp=2, pp=2, schedule="zb-h1", dp_mode="gather")):
        sync = make(micro_batches=4, precision="bf16", step="clip-some", **grid)
        pv = with_values(sync, {INDEX["step"]: "pv-clip-some"})
        out += [(pv, make(precision="bf16", step="clip-some"), "bf16"), (pv, sync, "exact")]
    # pp 4: middle stages settle after a receive and before computing, and
    # send on; the first stage's forward computed ahead is redone after a rollback.
    for schedule in ("zb-h2", "zb-v"):
        sync = make(pp=4, schedule=schedule, micro_batches=4, precision="fp32", step="clip-some")
        pv = with_values(sync, {INDEX["step"]: "pv-clip-some"})
        out += [(pv, make(precision="fp32", step="clip-some"), "fp32"), (pv, sync, "exact")]
    return out


# Layouts that once failed: always in the covering subset, because a pairwise
# cover need not hold their 5-way interaction (the greedy cover starts from them).
REGRESSIONS = [
    make(dp=2, tp=2, sp=True, zero=2, micro_batches=2),  # grad_norm 6e-4 off serial
    make(dp=2, tp=2, sp=True, zero=3, micro_batches=4),
]


def offload_pairs(every=False):
    """(layout, the same with offload) for every optimizer offload setting x
    ZeRO stage x dp in {1, 2}, and the parameter offload settings at ZeRO-3:
    same arithmetic in another home, so equal bit for bit. Two micro-batches
    (gradients accumulate), low persistence (every unit sharded) and bf16 at
    stage 2 (f32 masters in the home too). Parameter offload runs beside
    fp32 and bf16 layouts: with `every`, each setting x dp x precision; else
    one run per setting, the four covering every (dp, precision) pair."""
    out = []
    for zero in (1, 2, 3):
        for dp in (1, 2):
            base = make(dp=dp, zero=zero, micro_batches=2,
                        precision="bf16" if zero == 2 else "fp32")
            out += [(base, with_values(base, {INDEX["offload"]: o}))
                    for o in ("cpu", "nvme", "cpu-split")]
    params = [o for o in dict(AXES)["offload"] if o.startswith("params-")]
    grid = list(itertools.product(params, (1, 2), ("fp32", "bf16"))) if every else \
        list(zip(params, (2, 1, 2, 1), ("fp32", "bf16", "bf16", "fp32")))
    for o, dp, precision in grid:
        base = make(dp=dp, zero=3, micro_batches=2, precision=precision)
        out.append((base, with_values(base, {INDEX["offload"]: o})))
    # cpu's host copy of the gradients where backward's copy is not the last
    # word: the tied copies summed over the pipeline's ends, 16-bit gradients
    # widened on the host, fp16 steps skipped on overflow, split backwards.
    # The same with the state split (offload.ratio) where gradients are 16-bit.
    for dp, zero, precision, schedule, o in ((2, 2, "bf16-reduce", "1f1b", "cpu"),
                                             (1, 1, "fp16-reduce", "1f1b", "cpu"),
                                             (1, 3, "bf16", "zb-h1", "cpu"),
                                             (2, 2, "bf16-reduce", "1f1b", "cpu-split")):
        base = make(dp=dp, pp=2, zero=zero, micro_batches=2, precision=precision,
                    schedule=schedule)
        out.append((base, with_values(base, {INDEX["offload"]: o})))
    return out


def async_pairs():
    """(layout saving every 2 steps, the same saving in the background) over
    a representative subset: data parallelism (replicated writes), tensor
    parallelism with SP (column shards with padding), pipeline stages, ZeRO
    1-3, offloaded optimizer state and parameter shards (read in waves through
    the bounded staging), PipeDream (read in place beside its weight stash),
    bf16 and fp16 (masters, the loss scaler). run_matrix slows the step-2
    drain so the optimizer meets it; every checkpoint must equal the
    synchronous run's bit for bit."""
    out = []
    for values in (dict(dp=2, micro_batches=2),
                   dict(dp=2, tp=2, sp=True, zero=1, precision="bf16"),
                   dict(dp=2, pp=2, zero=2, precision="fp16", micro_batches=2),
                   dict(dp=2, zero=3, offload="cpu"),
                   dict(dp=1, tp=2, zero=3, offload="params-nvme+nvme", precision="bf16"),
                   dict(dp=2, zero=3, offload="params-cpu"),
                   dict(dp=2, pp=2, schedule="pipedream", micro_batches=2, precision="bf16")):
        base = make(checkpoints="every2", **values)
        out.append((base, with_values(base, {INDEX["checkpoints"]: "every2-async"})))
    return out


# --- the bounded whole matrix -------------------------------------------------

def whole_matrix():
    """--all: the product dp x tp x pp x schedule x sp x zero in fp32 and, at
    zero 0, in bf16 and fp16, every one with 4 micro-batches per rank (so
    gradients accumulate and interleaved fits pp 4); schedules only where
    pp > 1 and sp only where tp > 1 (elsewhere they change nothing). Then
    one-axis variations of the other axes around dp2 tp2 pp2 1f1b sp, at zero
    0 and at zero 3."""
    out = []
    for dp, tp, pp in itertools.product([1, 2, 4], repeat=3):
        if dp * tp * pp > MAX_RANKS:
            continue
        for sched in (dict(AXES)["schedule"] if pp > 1 else ["1f1b"]):
            for sp in ([False, True] if tp > 1 else [False]):
                base = dict(dp=dp, tp=tp, pp=pp, schedule=sched, sp=sp, micro_batches=4)
                out += [make(**base, zero=z) for z in range(4)]
                out += [make(**base, precision=p) for p in ("bf16", "fp16")]
    for zero in (0, 3):
        centre = dict(dp=2, tp=2, pp=2, schedule="1f1b", sp=True, zero=zero, micro_batches=4)
        for axis in ("dp_mode", "micro_batches", "recompute", "precision", "persistence", "bucket"):
            for value in dict(AXES)[axis]:
                if value != centre.get(axis, DEFAULT[axis]):
                    out.append(make(**dict(centre, **{axis: value})))
    return list(dict.fromkeys(out))


def context_layouts(every=False):
    """Context parallelism (cp 2 and 4) crossed with the other axes, each
    against the serial run of its precision. Quick: a few rows, each putting
    the ring beside one other parallelism or setting. --all: cp x dp x tp x pp
    (at most MAX_RANKS ranks) x schedule x sp x zero with 4 micro-batches per
    rank, in fp32 and, at zero 0, bf16 and fp16; then one-axis variations of
    recompute and precision around cp2 tp2 pp2 sp."""
    if not every:
        return [make(cp=2, micro_batches=2), make(cp=4),
                make(cp=2, dp=2, zero=1, micro_batches=2), make(cp=2, tp=2, sp=True),
                make(cp=2, pp=2, schedule="zb-h1", micro_batches=2),
                make(cp=2, recompute="full", precision="bf16"),
                make(cp=2, dp=2, zero=3, precision="fp16", micro_batches=2)]
    out = []
    for cp in (2, 4):
        for dp, tp, pp in itertools.product([1, 2, 4], [1, 2], [1, 2]):
            if cp * dp * tp * pp > MAX_RANKS:
                continue
            for sched in (dict(AXES)["schedule"] if pp > 1 else ["1f1b"]):
                for sp in ([False, True] if tp > 1 else [False]):
                    base = dict(cp=cp, dp=dp, tp=tp, pp=pp, schedule=sched, sp=sp, micro_batches=4)
                    out += [make(**base, zero=z) for z in range(4)]
                    out += [make(**base, precision=p) for p in ("bf16", "fp16")]
    centre = dict(cp=2, tp=2, pp=2, schedule="1f1b", sp=True, micro_batches=4)
    for axis in ("recompute", "precision"):
        for value in dict(AXES)[axis]:
            out.append(make(**dict(centre, **{axis: value})))
    return list(dict.fromkeys(out))
