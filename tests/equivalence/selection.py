"""Which layouts a run of the equivalence matrix trains: the listed rows
(--all, --quick) or the pairwise cover (cover.py) with the Llama rows, the
offload, async, context, post-validation and resume rows beside them, all
narrowed by --filter and --max-ranks. Validity is asked of `trident check
--layouts` (train's own validator); refused layouts come back with its reason.

--filter and --max-ranks narrow the listed rows before the validator sees
them, so a filtered run starts in seconds. The cover is the exception: which
layouts it takes depends on every candidate's verdict, so it asks about all
of them and narrows what it chose."""
import collections
import json
import os
import subprocess

import cover
import layouts as L
import llama

DECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deck.toml")

Selection = collections.namedtuple(
    "Selection", "chosen offload async_ context post_validation resume refused notes")


def ask_validator(binary, layout_list, batch, workdir, env):
    """One `trident check --layouts` call: a verdict (dict) per layout."""
    if not layout_list:
        return []
    path = os.path.join(workdir, "layouts.txt")
    with open(path, "w") as f:
        for x in layout_list:
            f.write(f"ranks={L.ranks(x)} " + " ".join(L.overrides(x, batch)) + "\n")
    out = subprocess.run([binary, "check", DECK, "--layouts", path], check=True,
                         capture_output=True, text=True, env=env).stdout
    verdicts = [json.loads(line) for line in out.splitlines()]
    assert len(verdicts) == len(layout_list), (len(verdicts), len(layout_list))
    return verdicts


def kept(args, x):
    """Whether --filter and --max-ranks keep layout x."""
    return args.filter in L.describe(x) and (not args.max_ranks or L.ranks(x) <= args.max_ranks)


def wanted(args, pairs):
    """The pairs whose second layout --filter and --max-ranks keep."""
    return [(a, b) for a, b in pairs if args.filter in L.describe(b)
            and (not args.max_ranks or max(L.ranks(a), L.ranks(b)) <= args.max_ranks)]


def split_valid(layout_list, refused, binary, batch, workdir, env):
    """The layouts the validator accepts; the others go to refused with its reason."""
    verdicts = ask_validator(binary, layout_list, batch, workdir, env)
    refused += [(x, v["error"]) for x, v in zip(layout_list, verdicts) if not v["valid"]]
    return [x for x, v in zip(layout_list, verdicts) if v["valid"]]


def valid_pairs(pairs, refused, binary, batch, workdir, env):
    """The pairs whose two layouts the validator accepts; the others go to
    refused with its reason."""
    if not pairs:
        return []
    verdicts = ask_validator(binary, [x for ab in pairs for x in ab], batch, workdir, env)
    why = [next((v["error"] for v in verdicts[2 * k:2 * k + 2] if not v["valid"]), None)
           for k in range(len(pairs))]
    refused += [(b, w) for (_, b), w in zip(pairs, why) if w]
    return [ab for ab, w in zip(pairs, why) if not w]


def covering_subset(args, binary, batch, workdir, env):
    """(the cover and the Llama rows, refused [(layout or pair name, reason)], notes)."""
    notes = []
    pool = cover.candidates(args.seed)
    verdicts = ask_validator(binary, pool, batch, workdir, env)
    valid = [x for x, v in zip(pool, verdicts) if v["valid"]]
    regressions = [x for x, v in zip(L.REGRESSIONS, ask_validator(binary, L.REGRESSIONS, batch,
                                                                   workdir, env)) if v["valid"]]
    # First every pair in fp32, where the tolerances are sharpest; then the
    # pairs only 16-bit layouts hold.
    fp32 = [x for x in valid if L.get(x, "precision") == "fp32"]
    chosen = cover.greedy_cover(valid, start=cover.greedy_cover(fp32, start=regressions))
    # Pairs no valid candidate holds, with the validator's reason: asked of
    # valid layouts that hold one of the two values, given the other (the
    # nearest layouts, so the reason is about the pair, not something else).
    refused, probes = [], []
    for pair in cover.uncoverable_pairs(valid):
        if cover.beyond_rank_bound(pair):
            continue  # more than 8 ranks: outside the matrix, not a refusal
        (i, a, j, b), = [k for k, v in cover.PAIRS.items() if v == pair]
        near = [x for x in valid if L.get(x, L.NAMES[i]) == L.AXES[i][1][a]
                or L.get(x, L.NAMES[j]) == L.AXES[j][1][b]][:20]
        probes += [(pair, L.with_values(x, {i: L.AXES[i][1][a], j: L.AXES[j][1][b]})) for x in near]
        if not near:
            notes.append(f"pair never drawn (raise candidates): {cover.PAIR_NAMES[pair]}")
    answers = ask_validator(binary, [x for _, x in probes], batch, workdir, env)
    reasons = collections.defaultdict(collections.Counter)
    for (pair, _), v in zip(probes, answers):
        if not v["valid"]:
            reasons[pair][v["error"].split(": ", 1)[-1]] += 1
    for pair, counts in reasons.items():
        refused.append((cover.PAIR_NAMES[pair], counts.most_common(1)[0][0]))
    notes.append(f"{len(pool)} candidates, {len(valid)} valid; {len(chosen)} layouts ({len(regressions)} "
                 f"regressions) cover every value pair a valid layout of <= {L.MAX_RANKS} ranks holds")
    chosen += split_valid(llama.quick_rows(), refused, binary, batch, workdir, env)
    return [x for x in chosen if kept(args, x)], refused, notes


def select(args, binary, batch, workdir, env):
    """Every row of this run, in the order they run."""
    if args.all or args.quick:
        listed = L.whole_matrix() + llama.whole_rows() if args.all else \
            L.REGRESSIONS + llama.quick_rows()
        refused, notes = [], []
        chosen = split_valid([x for x in listed if kept(args, x)], refused, binary, batch,
                             workdir, env)
    else:
        chosen, refused, notes = covering_subset(args, binary, batch, workdir, env)
    if args.max_runs:
        chosen = chosen[:args.max_runs]
    offload = [] if args.quick else wanted(args, L.offload_pairs(every=args.all))
    async_ = [] if args.quick else wanted(args, L.async_pairs())
    # What the validator refuses is reported, not run.
    context = [] if args.quick else split_valid(
        [x for x in L.context_layouts(every=args.all) if kept(args, x)], refused, binary, batch,
        workdir, env)
    post_validation = [] if args.quick else [
        (x, ref, tol) for x, ref, tol in L.post_validation_runs() if kept(args, x)]
    resume = valid_pairs(wanted(args, llama.resume_pairs(every=args.all)), refused, binary,
                         batch, workdir, env)
    return Selection(chosen, offload, async_, context, post_validation, resume, refused, notes)
