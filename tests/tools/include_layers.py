#!/usr/bin/env python3
"""Fails when a folder under src/ includes a folder drawn above it in the layering,
or when model/ reaches what belongs to the parallelisms wrapped around it.

Layers, top to bottom (folders on one line may include each other):
    app
    train
    engine
    parallel optim model
    memory compute comm grid checkpoint io offload
    core
plan/ may include any folder; only app/ may include plan/.

model/ is the model's math only. No file of it reaches, directly or through any
header it includes (followed transitively), parallel/pipeline/, parallel/zero/,
engine/ or <mpi.h>; and no header of it names a pipeline runner's send pool,
activation slot or W buffer (MODEL_WORDS).

<mpi.h>: only grid/grid.hpp and comm/ headers include it, and the headers of the
MPI-free folders (MPI_FREE) do not reach it through the headers they include.
Usage: include_layers.py SRC_DIR
"""
import pathlib
import re
import sys

LAYERS = [
    ["app"],
    ["train"],
    ["engine"],
    ["parallel", "optim", "model"],
    ["memory", "compute", "comm", "grid", "checkpoint", "io", "offload"],
    ["core"],
]
RANK = {folder: depth for depth, row in enumerate(LAYERS) for folder in row}

# Edges that break the layering on purpose, each with the reason it stays.
ALLOWED = {
    # The deck and a checkpoint carry the model's shape; GptConfig is a plain struct
    # without behaviour, so these read model/gpt_config.hpp only.
    ("io", "model", "model/gpt_config.hpp"),
    ("checkpoint", "model", "model/gpt_config.hpp"),
}

SOURCES = {".hpp", ".cpp", ".cu", ".cuh", ".h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^">]+)[">]')

# What model/ may not reach through any chain of includes: prefixes of quoted
# headers (relative to src/) and system headers.
MODEL_UNREACHABLE = ("parallel/pipeline/", "parallel/zero/", "engine/")
MODEL_UNREACHABLE_SYSTEM = {"mpi.h"}
# The pipeline runner's vocabulary: a model header naming one of these holds
# state that belongs to the runner.
MODEL_WORDS = re.compile(r"slot|send_buffer|send_pool|weight_buffer|W buffer", re.IGNORECASE)


def layer_edges(src: pathlib.Path):
    for path in sorted(src.rglob("*")):
        if path.suffix not in SOURCES:
            continue
        source = path.relative_to(src).parts[0]
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target, header = match.group(1), f"{match.group(1)}/{match.group(2)}"
            if target == source or target not in RANK and target != "plan":
                continue
            if (source, target, header) in ALLOWED:
                continue
            if target == "plan":
                if source != "app":
                    yield f"{path.relative_to(src)}:{number}: {source}/ includes {header} (only app/ reads plan/)"
                continue
            if source == "plan":
                continue
            if source in RANK and RANK[target] < RANK[source]:
                yield f"{path.relative_to(src)}:{number}: {source}/ includes {header}, a layer above it"


def includes_of(src: pathlib.Path, relative: str, cache: dict):
    """The (kind, name) includes of one file under src ('"' quoted, '<' system)."""
    if relative not in cache:
        path = src / relative
        found = []
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                match = ANY_INCLUDE.match(line)
                if match:
                    found.append((match.group(1), match.group(2)))
        cache[relative] = found
    return cache[relative]


def model_reaches(src: pathlib.Path):
    """Each forbidden header a model/ file reaches, with the chain that reaches it."""
    cache = {}
    for path in sorted((src / "model").rglob("*")):
        if path.suffix not in SOURCES:
            continue
        start = str(path.relative_to(src))
        chains = {start: [start]}
        todo = [start]
        while todo:
            current = todo.pop()
            for kind, name in includes_of(src, current, cache):
                chain = chains[current] + [name]
                if kind == "<" or not (src / name).is_file():
                    if name in MODEL_UNREACHABLE_SYSTEM:
                        yield f"{start}: reaches <{name}> through {' -> '.join(chain)}"
                    continue
                if name.startswith(MODEL_UNREACHABLE):
                    yield f"{start}: reaches {name} through {' -> '.join(chain)}"
                    continue
                if name not in chains:
                    chains[name] = chain
                    todo.append(name)


def model_runner_words(src: pathlib.Path):
    for path in sorted((src / "model").rglob("*")):
        if path.suffix not in {".hpp", ".h", ".cuh"}:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = MODEL_WORDS.search(line)
            if match:
                yield (f"{path.relative_to(src)}:{number}: names '{match.group(0)}', the pipeline "
                       "runner's (send pools, slots and W buffers live in train/ or parallel/pipeline/)")


# Folders and headers whose headers reach no <mpi.h>, directly or through the
# headers they include: the grid's shape, the deck and what lies below the
# communicators. Only grid/grid.hpp and comm/ include <mpi.h> at all.
MPI_HEADERS = ("grid/grid.hpp", "comm/")
MPI_FREE = ("core/", "compute/", "memory/", "io/", "optim/", "model/", "offload/",
            "checkpoint/", "grid/grid_shape.hpp", "parallel/pipeline/schedule_costs.hpp")
MPI_INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]')


def mpi_leaks(src: pathlib.Path):
    headers = {}
    for path in sorted(src.rglob("*")):
        if path.suffix in {".hpp", ".h", ".cuh"}:
            lines = path.read_text(errors="replace").splitlines()
            headers[path.relative_to(src).as_posix()] = [
                m.group(1) for m in map(MPI_INCLUDE.match, lines) if m]
    reaches = {}

    def chain(header, seen=()):  # header -> ... -> the header that includes <mpi.h>, or None
        if header not in reaches and header not in seen:
            reaches[header] = None
            for included in headers[header]:
                if included == "mpi.h":
                    reaches[header] = [header]
                elif included in headers and (sub := chain(included, seen + (header,))):
                    reaches[header] = [header] + sub
                if reaches[header]:
                    break
        return reaches.get(header)

    for header, included in headers.items():
        if "mpi.h" in included and not header.startswith(MPI_HEADERS):
            yield f"{header}: includes <mpi.h> (only grid/grid.hpp and comm/ may)"
        elif header.startswith(MPI_FREE) and (path := chain(header)):
            yield f"{header}: reaches <mpi.h> through {' -> '.join(path[1:])}"


def main() -> int:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    problems = (list(layer_edges(src)) + list(model_reaches(src)) + list(model_runner_words(src))
                + list(mpi_leaks(src)))
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} include(s) or name(s) against the layering in {__file__}")
        return 1
    print("include layering ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
