#!/usr/bin/env python3
"""include_layers.py fails on each kind of planted violation and passes a clean tree."""
import pathlib
import subprocess
import sys
import tempfile

CHECK = pathlib.Path(__file__).with_name("include_layers.py")


def run(files: dict) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "src"
        for name, text in files.items():
            path = src / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return subprocess.run([sys.executable, str(CHECK), str(src)], capture_output=True, text=True)


CLEAN = {
    "model/gpt.hpp": '#include "memory/arena.hpp"\n#include "model/stage_spec.hpp"\n',
    "model/stage_spec.hpp": "struct StageSpec {};\n",
    "memory/arena.hpp": '#include "core/dtype.hpp"\n#include <cstddef>\n',
    "core/dtype.hpp": "",
    "comm/mpi_communicator.hpp": "#include <mpi.h>\n",
    "parallel/zero/zero_storage.hpp": '#include "model/gpt.hpp"\n',
    "parallel/pipeline/schedule.hpp": "",
    "engine/grad_engine.hpp": '#include "model/gpt.hpp"\n',
}

# (what is planted, text the check must print)
PLANTED = [
    ({"model/gpt.cpp": '#include "parallel/pipeline/schedule.hpp"\n'}, "reaches parallel/pipeline/schedule.hpp"),
    # Through two headers of allowed layers: the chain is followed.
    ({"memory/arena.hpp": '#include "comm/ledger.hpp"\n', "comm/ledger.hpp": '#include "comm/mpi_communicator.hpp"\n'},
     "reaches <mpi.h> through model/gpt.hpp -> memory/arena.hpp -> comm/ledger.hpp"),
    ({"model/param_table.hpp": '#include "memory/zero_view.hpp"\n',
      "memory/zero_view.hpp": '#include "parallel/zero/zero_storage.hpp"\n'}, "reaches parallel/zero/zero_storage.hpp"),
    ({"model/gpt.hpp": '#include "engine/grad_engine.hpp"\n'}, "includes engine/grad_engine.hpp, a layer above it"),
    ({"model/acts.hpp": "float* send_buffer(int k);\n"}, "names 'send_buffer'"),
    ({"model/acts.hpp": "int activation_slots = 1;\n"}, "names 'slot'"),
    ({"model/acts.hpp": "// kept in a W buffer until W runs\n"}, "names 'W buffer'"),
    ({"model/acts.hpp": "int weight_buffers = 0;\n"}, "names 'weight_buffer'"),
    ({"memory/arena.hpp": '#include "train/trainer.hpp"\n', "train/trainer.hpp": ""}, "a layer above it"),
]


def main() -> int:
    failures = []
    clean = run(CLEAN)
    if clean.returncode != 0:
        failures.append(f"clean tree rejected:\n{clean.stdout}")
    for planted, expected in PLANTED:
        result = run({**CLEAN, **planted})
        if result.returncode == 0 or expected not in result.stdout:
            failures.append(f"planted {sorted(planted)} not caught as '{expected}':\n{result.stdout}")
    # The words are looked for in model/'s headers only: a runner may name its slots.
    runner = run({**CLEAN, "train/slots.hpp": "int activation_slots = 1;\n"})
    if runner.returncode != 0:
        failures.append(f"train/ naming slots rejected:\n{runner.stdout}")
    for failure in failures:
        print(failure)
    print(f"{len(PLANTED) + 2 - len(failures)} of {len(PLANTED) + 2} cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
