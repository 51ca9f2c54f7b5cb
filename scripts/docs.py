#!/usr/bin/env python3
"""Keeps the docs true to the code.

    scripts/docs.py [--bin build/bucketrl]           regenerate the generated parts of docs/
    scripts/docs.py --check [--bin build/bucketrl]   fail if a generated part is stale, or a
                                                     documented command or flag does not exist

Generated parts sit between `<!-- BEGIN generated: NAME -->` and `<!-- END generated: NAME -->`:
  config  the configuration reference (`bucketrl config --markdown`, from the config tables)
  cli     every subcommand's --help
  tests   the test catalogue: each tests/<area>/<name>_test.cpp, its labels and its header comment
  bench   the benchmark catalogue: each bench/ script or program and its header comment
Every `bucketrl <command> --flag` written in README.md, docs/, deploy/ and BENCHMARKS.md (code
blocks and inline code) must name a command the binary has and flags that command accepts.
"""
import argparse
import concurrent.futures
import functools
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = re.compile(r"<!-- BEGIN generated: (\w+) -->\n")


@functools.lru_cache(maxsize=None)
def run(binary, *args):
    # argv[0] "bucketrl": help texts name the command, not where this checkout built it
    return subprocess.run(["bucketrl", *args], executable=binary, check=True, capture_output=True, text=True).stdout


def commands(binary):
    """Subcommand names from `bucketrl --help` (CLI11 lists them under SUBCOMMANDS:)."""
    out, names, inside = run(binary, "--help"), [], False
    for line in out.splitlines():
        if line.strip().upper().startswith("SUBCOMMANDS"):
            inside = True
        elif inside and re.match(r"^\s+[a-z][\w-]*\s", line + " "):
            names.append(line.split()[0])
    return names


def gen_config(binary):
    return run(binary, "config", "--markdown")


def gen_cli(binary):
    parts = []
    for name in commands(binary):
        parts.append(f"### bucketrl {name}\n\n```\n{run(binary, name, '--help').rstrip()}\n```\n")
    return "\n".join(parts)


def header(path):
    """The first paragraph of a file's leading comment (// or #, or a Python docstring)."""
    lines = path.read_text().splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    out = []
    if lines and lines[0].startswith('"""'):
        first = lines[0][3:]
        for line in [first] + lines[1:]:
            end = '"""' in line
            line = line.split('"""')[0].strip()
            if not line and out:
                break
            if line:
                out.append(line)
            if end:
                break
        return " ".join(out)
    mark = "//" if path.suffix in (".cpp", ".h") else "#"
    for line in lines:
        if not line.startswith(mark):
            break
        text = line[len(mark):].strip()
        if not text:
            if out:
                break
            continue
        out.append(text)
    return " ".join(out)


def cell(text):
    return text.replace("|", "\\|")


def gen_bench(_binary):
    out, missing = ["| file | what it measures |", "|---|---|"], []
    for f in sorted((ROOT / "bench").iterdir()):
        if f.suffix not in (".sh", ".cpp", ".py"):
            continue
        h = header(f)
        if not h:
            missing.append(str(f.relative_to(ROOT)))
        out.append(f"| `bench/{f.name}` | {cell(h)} |")
    if missing:
        sys.exit("docs: these benchmarks have no header comment saying what they measure: " + ", ".join(missing))
    return "\n".join(out)


def gen_tests(_binary):
    out, missing = [], []
    for area in sorted(p for p in (ROOT / "tests").iterdir() if p.is_dir()):
        files = sorted(area.glob("*_test.cpp"))
        if not files:
            continue
        out.append(f"### {area.name}\n\n| test | labels | what it checks |\n|---|---|---|")
        for f in files:
            name = f.stem
            label = ("s3" if name.endswith("_s3_test") else "oracle" if name.endswith("_oracle_test")
                     else "full" if name.endswith("_slow_test") else "quick")
            h = header(f)
            if not h:
                missing.append(str(f.relative_to(ROOT)))
            out.append(f"| `{name}` | {label} | {cell(h)} |")
        out.append("")
    if missing:
        sys.exit("docs: these tests have no header comment saying what they check: " + ", ".join(missing))
    return "\n".join(out)


GENERATORS = {"config": gen_config, "cli": gen_cli, "tests": gen_tests, "bench": gen_bench}


def regenerate(text, binary):
    out, pos = [], 0
    for m in BEGIN.finditer(text):
        name = m.group(1)
        end = text.find(f"<!-- END generated: {name} -->", m.end())
        if end < 0:
            sys.exit(f"docs: BEGIN generated: {name} has no END")
        if name not in GENERATORS:
            sys.exit(f"docs: no generator named {name} (known: {', '.join(GENERATORS)})")
        out += [text[pos:m.end()], GENERATORS[name](binary).rstrip("\n") + "\n"]
        pos = end
    return "".join(out) + text[pos:]


def doc_files():
    files = [ROOT / "README.md", ROOT / "BENCHMARKS.md"]
    files += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "deploy").glob("**/*.md"))
    return [f for f in files if f.exists()]


def command_spans(text):
    """Text that shows commands: indented and fenced code blocks, and inline code."""
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            yield line
        else:
            yield from re.findall(r"`([^`]+)`", line)


def check_commands(binary):
    names = set(commands(binary))
    flags_of = {}

    def flags(cmd):
        if cmd not in flags_of:
            flags_of[cmd] = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", run(binary, *cmd, "--help")))
        return flags_of[cmd]

    errors = []
    for f in doc_files():
        for span in command_spans(f.read_text()):
            for m in re.finditer(r"(?:^|[\s(/$])bucketrl\s+([a-z][\w-]*)((?:\s+[a-z][\w-]*)?)([^#|;&`]*)", span):
                cmd, sub, rest = m.group(1), m.group(2).strip(), m.group(3)
                if cmd not in names:
                    # prose such as "bucketrl workers" is not a command line
                    if re.search(r"\s--", rest):
                        errors.append(f"{f.relative_to(ROOT)}: `bucketrl {cmd}` is not a command: {span.strip()}")
                    continue
                path = [cmd]
                if cmd == "bucket" and sub:
                    path.append(sub)
                known = flags(tuple(path))
                for flag in re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", rest):
                    if flag not in known:
                        errors.append(f"{f.relative_to(ROOT)}: `bucketrl {' '.join(path)}` has no {flag}: "
                                      f"{span.strip()}")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bucketrl"))
    a = ap.parse_args()
    # Each call loads libtorch (~1 s): every command's --help at once, two at a time per core.
    with concurrent.futures.ThreadPoolExecutor() as pool:
        list(pool.map(lambda c: run(a.bin, c, "--help"), commands(a.bin)))
    stale = []
    for f in sorted((ROOT / "docs").glob("*.md")):
        text = f.read_text()
        new = regenerate(text, a.bin)
        if new != text:
            if a.check:
                stale.append(str(f.relative_to(ROOT)))
            else:
                f.write_text(new)
                print(f"docs: rewrote {f.relative_to(ROOT)}")
    errors = check_commands(a.bin)
    for e in errors:
        print(e, file=sys.stderr)
    if stale:
        print(f"docs: stale generated parts in {', '.join(stale)}: run scripts/docs.py", file=sys.stderr)
    if stale or errors:
        sys.exit(1)
    print(f"docs: generated parts current; commands and flags in {len(doc_files())} files exist")


if __name__ == "__main__":
    main()
