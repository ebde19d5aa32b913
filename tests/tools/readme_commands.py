#!/usr/bin/env python3
"""README's two commands, run one after the other on one checkout, as a newcomer runs them.

README.md gives two one-line commands under bold headings: the first sets up, builds and
trains the default deck; the second builds and runs the whole test suite (what .ci/run
runs). Checks, without building or installing anything:
  - each command's `cmake --build` is its preset's binaryDir, and the run command's binary
    paths and the test command's `ctest --test-dir` lie in it;
  - where both share a build directory, every cache variable one command's configure sets
    (its preset's cacheVariables and its -D options) the other's sets too, so neither
    builds what the other cached;
  - the test command's ctest has --no-tests=error, and that ctest, pointed at a build
    directory without tests, exits non-zero;
  - .ci/run's marked block and docs/testing.md's command are README's test command verbatim;
  - the configure steps of both commands, as written, in copies of the source tree: the
    test command's after the run command's gives the same tests (ctest -N) as on a clean
    tree, and the run command's after the test command's the same cache as on a clean tree.
Usage: readme_commands.py SOURCE_DIR WORK_DIR
"""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}")


def readme_commands(readme):
    """(heading, command) of each ```bash block right after a bold heading."""
    lines = readme.read_text().splitlines()
    found, heading = [], None
    for i, line in enumerate(lines):
        if re.match(r"^\*\*.+\*\*", line):
            heading = line
        elif line.strip() == "```bash" and heading is not None:
            end = lines.index("```", i + 1)
            found.append((heading, lines[i + 1:end]))
            heading = None
        elif line.strip():
            heading = None
    return found


class Command:
    """One README command: its `&&` steps, as shell words without leading VAR=value."""

    def __init__(self, name, text):
        self.name, self.text = name, text
        self.steps = []  # (step text, words)
        for step in text.split(" && "):
            words = shlex.split(step)
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words.pop(0)
            self.steps.append((step, words))

    def steps_of(self, *prefix):
        return [(s, w) for s, w in self.steps if w[:len(prefix)] == list(prefix)]

    def one(self, *prefix):
        steps = self.steps_of(*prefix)
        if len(steps) != 1:
            fail(f"{self.name} command: expected one `{' '.join(prefix)}` step, found {len(steps)}")
            return None, []
        return steps[0]


def option_value(words, name):
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(name + "="):
            return w[len(name) + 1:]
    return None


def resolve_preset(presets, name):
    """binaryDir (relative to the source) and cacheVariables of a configure preset."""
    by_name = {p["name"]: p for p in presets["configurePresets"]}
    if name not in by_name:
        fail(f"no configure preset '{name}' in CMakePresets.json")
        return None, {}
    preset = by_name[name]
    binary_dir, cache = None, {}
    parents = preset.get("inherits", [])
    for parent in [parents] if isinstance(parents, str) else reversed(parents):
        parent_dir, parent_cache = resolve_preset(presets, parent)
        binary_dir = parent_dir or binary_dir
        cache.update(parent_cache)
    for key, value in preset.get("cacheVariables", {}).items():
        cache[key] = value["value"] if isinstance(value, dict) else value
    if "binaryDir" in preset:
        binary_dir = os.path.normpath(preset["binaryDir"].replace("${sourceDir}/", ""))
    return binary_dir, cache


def configure_sets(presets, words):
    """The build directory and the cache variables a `cmake --preset P -D...` step sets."""
    binary_dir, cache = resolve_preset(presets, option_value(words, "--preset"))
    for w in words:
        if w.startswith("-D"):
            key, _, value = w[2:].partition("=")
            cache[key.split(":")[0]] = value
    return binary_dir, cache


def copy_tree(source, dest):
    """The source tree as a checkout has it: tracked and untracked files, not ignored ones."""
    listed = subprocess.run(["git", "-C", str(source), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True)
    if listed.returncode == 0:
        for rel in filter(None, listed.stdout.decode().split("\0")):
            src = source / rel
            if src.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel)
    else:  # not a git checkout (an unpacked archive): all but the top's outputs
        def outputs(folder, names):
            if pathlib.Path(folder) != source:
                return []
            return [n for n in names if n.startswith("build") or n in (".git", "data", "checkpoints")]
        shutil.copytree(source, dest, ignore=outputs, dirs_exist_ok=True)


def run_step(step, cwd):
    out = subprocess.run(["bash", "-c", step], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"`{step}` in {cwd} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    return out.returncode == 0


def tests_listed(build):
    out = subprocess.run(["ctest", "--test-dir", str(build), "-N"], capture_output=True, text=True)
    return re.findall(r"Test +#\d+: (\S+)", out.stdout)


def cache_entries(build):
    path = build / "CMakeCache.txt"
    if not path.exists():
        return {}
    # The options (TRIDENT_*:BOOL) and the build type: what decides which targets build.
    entries = re.findall(r"^(TRIDENT_\w+:BOOL|CMAKE_BUILD_TYPE:\w+)=(.*)$", path.read_text(), re.M)
    return dict(entries)


def main():
    source, work = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    presets = json.loads((source / "CMakePresets.json").read_text())
    blocks = readme_commands(source / "README.md")
    if len(blocks) < 2 or any(len(lines) != 1 for _, lines in blocks[:2]):
        fail(f"README.md: expected two one-line ```bash commands under bold headings, found {blocks}")
        return
    run, test = Command("run", blocks[0][1][0]), Command("test", blocks[1][1][0])
    print(f"run command:  {run.text}\ntest command: {test.text}")

    # Each command builds where it configures, and uses what it built.
    dirs, caches = {}, {}
    for cmd in (run, test):
        step, words = cmd.one("cmake", "--preset")
        if not step:
            continue
        dirs[cmd.name], caches[cmd.name] = configure_sets(presets, words)
        built = os.path.normpath(cmd.one("cmake", "--build")[1][2])
        if built != dirs[cmd.name]:
            fail(f"{cmd.name} command configures {dirs[cmd.name]} but builds {built}")
    if len(dirs) < 2:
        return
    binaries = [w for _, words in run.steps for w in words if w.endswith("/trident")]
    if not binaries:
        fail("run command: runs no trident binary")
    for b in binaries:
        if os.path.normpath(b) != os.path.join(dirs["run"], "src", "trident"):
            fail(f"run command runs {b}, not the binary it builds in {dirs['run']}/")
    ctest = test.one("ctest")[1]
    if ctest and os.path.normpath(option_value(ctest, "--test-dir") or ".") != dirs["test"]:
        fail(f"test command: ctest --test-dir is not {dirs['test']}, the directory it builds")
    if "--no-tests=error" not in ctest:
        fail("test command: ctest without --no-tests=error passes when it finds no test")

    # A shared build directory: each configure sets every variable the other sets.
    if dirs["run"] == dirs["test"]:
        for a, b in (("run", "test"), ("test", "run")):
            for key in sorted(set(caches[a]) - set(caches[b])):
                fail(f"both commands configure {dirs['run']}/, the {a} command sets {key} and "
                     f"the {b} command does not: it builds what the {a} command left cached")
    print(f"build directories: run {dirs['run']}/ {sorted(caches['run'].items())}, "
          f"test {dirs['test']}/ {sorted(caches['test'].items())}")

    # The copies of README's test command.
    ci = (source / ".ci" / "run").read_text()
    block = re.search(r"^# --- README test command.*\n((?:(?!# ---).*\n)*)# ---$", ci, re.M)
    if not block or block.group(1).strip() != test.text:
        fail(".ci/run's marked block is not README's test command verbatim")
    testing = (source / "docs" / "testing.md").read_text()
    if f"```bash\n{test.text}\n```" not in testing:
        fail("docs/testing.md does not show README's test command verbatim")

    # ctest as the test command runs it, on a build directory without tests.
    shutil.rmtree(work, ignore_errors=True)
    empty = work / "empty"
    empty.mkdir(parents=True)
    if ctest:
        words = list(ctest)
        i = words.index("--test-dir") if "--test-dir" in words else None
        if i is not None:
            words[i + 1] = str(empty)
        out = subprocess.run(words, capture_output=True, text=True)
        print(f"`{shlex.join(words)}` exited {out.returncode}")
        if out.returncode == 0:
            fail(f"the test command's ctest exits 0 on a build directory without tests:\n{out.stdout}")

    # The configure steps, as written, in order, against each alone on a clean tree.
    configure = {cmd.name: cmd.one("cmake", "--preset")[0] for cmd in (run, test)}
    one, other = work / "run-then-test", work / "test-then-run"
    for tree in (one, other):
        copy_tree(source, tree)
    if not (run_step(configure["run"], one) and run_step(configure["test"], other)):
        return
    run_alone = cache_entries(one / dirs["run"])
    test_alone = tests_listed(other / dirs["test"])
    if not (run_step(configure["test"], one) and run_step(configure["run"], other)):
        return
    test_after_run = tests_listed(one / dirs["test"])
    run_after_test = cache_entries(other / dirs["run"])
    print(f"tests configured: {len(test_alone)} on a clean tree, {len(test_after_run)} after "
          f"the run command")
    if not test_alone:
        fail("the test command's configure on a clean tree registers no test")
    if test_after_run != test_alone:
        missing = sorted(set(test_alone) - set(test_after_run))
        fail(f"after the run command, the test command registers {len(test_after_run)} tests, "
             f"not {len(test_alone)}; missing: {' '.join(missing[:20])}")
    if run_after_test != run_alone:
        diff = {k: (run_alone.get(k), run_after_test.get(k))
                for k in set(run_alone) | set(run_after_test)
                if run_alone.get(k) != run_after_test.get(k)}
        fail(f"after the test command, the run command's cache differs (alone, after): {diff}")


if __name__ == "__main__":
    main()
    if failures:
        sys.exit(1)
    print("ok: README's commands keep to their own builds, in either order")
