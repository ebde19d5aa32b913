"""The Llama axis of the layout-equivalence matrix: layouts of the Llama
configuration (layouts.MODEL_KEYS["llama"]: grouped-query attention, RoPE,
RMSNorm, SwiGLU, no biases, an untied head), each compared with the serial
Llama run of its precision, and checkpoints of it resumed on another layout.

A few rows run in CI and with --quick (quick_rows, resume_pairs); --all runs
the cross (whole_rows, every resume pair)."""
import itertools

import layouts as L

SCHEDULES = ["1f1b", "interleaved", "zb-h1", "zb-v"]  # interleaved: v 2; zb-v: 2 chunks


def llama(**values):
    return L.make(model="llama", **values)


def quick_rows():
    """Each parallelism at least once on the Llama model: tensor parallelism at
    2 (with SP) and at 4 (one key/value head a rank), each pipeline schedule,
    ZeRO 1-3, bf16 and fp16, full recomputation."""
    return [
        llama(tp=2, sp=True, micro_batches=2),
        llama(tp=4, micro_batches=2),
        llama(dp=2, tp=2, pp=2, schedule="1f1b", sp=True, zero=1, micro_batches=2),
        llama(dp=2, pp=2, schedule="interleaved", zero=3, micro_batches=4),
        llama(tp=2, pp=2, schedule="zb-v", sp=True, micro_batches=2),
        llama(dp=2, tp=2, pp=2, schedule="zb-h1", zero=2, micro_batches=2, recompute="full"),
        llama(dp=2, tp=2, zero=1, precision="bf16", micro_batches=2),
        llama(tp=4, pp=2, schedule="1f1b", sp=True, precision="fp16", micro_batches=2),
    ]


def whole_rows():
    """--all: dp x tp x pp (at most 8 ranks) x the schedules where pp > 1 x SP
    where tp > 1, each in fp32 (ZeRO 0, and 1-3 where dp > 1: with one data
    rank there is nothing to shard), bf16 and fp16, 4 micro-batches per rank;
    then recomputation (selective, full, full unpartitioned) around dp2 tp2 pp2
    1f1b SP at ZeRO 0 and 3."""
    out = []
    for dp, tp, pp in itertools.product([1, 2, 4], repeat=3):
        if dp * tp * pp > L.MAX_RANKS:
            continue
        for schedule in (SCHEDULES if pp > 1 else ["1f1b"]):
            for sp in ([False, True] if tp > 1 else [False]):
                base = dict(dp=dp, tp=tp, pp=pp, schedule=schedule, sp=sp, micro_batches=4)
                out += [llama(**base, zero=z) for z in (range(4) if dp > 1 else [0])]
                out += [llama(**base, precision=p) for p in ("bf16", "fp16")]
    for zero in (0, 3):
        for recompute in ("selective", "full", "full-unpartitioned"):
            out.append(llama(dp=2, tp=2, pp=2, schedule="1f1b", sp=True, zero=zero,
                             micro_batches=4, recompute=recompute))
    return list(dict.fromkeys(out))


def resume_pairs(every=False):
    """(layout that trains and saves every 2 steps, another layout that resumes
    its step-2 checkpoint and trains to the end): the resumed steps and the
    final state must equal the serial run's at the matrix's tolerances. The
    key/value heads a tensor rank holds change (tp 2 -> 4 -> 1), the pipeline's
    cut and schedule, ZeRO's shards; with `every`, 16-bit runs too."""
    pairs = [(llama(dp=2, tp=2, pp=2, sp=True, zero=1, micro_batches=2, checkpoints="every2"),
              llama(tp=4, micro_batches=2))]
    if every:
        pairs += [
            (llama(tp=4, pp=2, schedule="zb-v", micro_batches=2, checkpoints="every2"),
             llama(dp=2, pp=2, schedule="interleaved", zero=3, micro_batches=2)),
            (llama(checkpoints="every2"),
             llama(dp=2, tp=2, pp=2, schedule="zb-h1", sp=True, zero=2, micro_batches=2)),
            (llama(dp=2, tp=2, zero=2, precision="bf16", micro_batches=2, checkpoints="every2"),
             llama(tp=2, pp=2, precision="bf16", micro_batches=2)),
        ]
    return pairs
