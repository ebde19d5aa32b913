#!/usr/bin/env python3
"""Fails when a folder under src/ includes a folder drawn above it in the layering.

Layers, top to bottom (folders on one line may include each other):
    app
    train
    engine
    parallel optim model
    memory compute comm grid checkpoint io offload
    core
plan/ may include any folder; only app/ may include plan/.
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

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')


def forbidden_edges(src: pathlib.Path):
    for path in sorted(src.rglob("*")):
        if path.suffix not in {".hpp", ".cpp", ".cu", ".cuh", ".h"}:
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


# Folders and headers whose headers reach no <mpi.h>, directly or through the
# headers they include: the grid's shape, the deck and what lies below the
# communicators. Only grid/grid.hpp and comm/ include <mpi.h> at all.
MPI_HEADERS = ("grid/grid.hpp", "comm/")
MPI_FREE = ("core/", "compute/", "memory/", "io/", "optim/", "model/", "offload/",
            "checkpoint/", "grid/grid_shape.hpp", "parallel/pipeline/schedule_costs.hpp")
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]')


def mpi_leaks(src: pathlib.Path):
    headers = {}
    for path in sorted(src.rglob("*")):
        if path.suffix in {".hpp", ".h", ".cuh"}:
            lines = path.read_text(errors="replace").splitlines()
            headers[path.relative_to(src).as_posix()] = [
                m.group(1) for m in map(ANY_INCLUDE.match, lines) if m]
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
    edges = list(forbidden_edges(src)) + list(mpi_leaks(src))
    for edge in edges:
        print(edge)
    if edges:
        print(f"{len(edges)} include(s) against the layering in {__file__}")
        return 1
    print("include layering ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
