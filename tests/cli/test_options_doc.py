#!/usr/bin/env python3
"""docs/options.md lists every flag that `ferry <command> --help` prints.

usage: test_options_doc.py FERRY_BINARY docs/options.md

For every command of `ferry --help`, the flags of its `--help` (every -x and --xxx in the option
column) must appear in that command's section (`## ferry <command>`) or in one of the shared
sections (`## Shared: <group>`) its `Also takes:` line names (`-h`/`--help` may be in any shared
section). Fails naming each missing flag and command.
"""
import re
import subprocess
import sys

# Flags another branch is removing (merged into --prefetch); not documented on purpose. Delete
# this list once that branch is in.
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def run(*args):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def commands(ferry):
    out = run(ferry, "--help")
    body = out.split("commands:", 1)[1]
    cmds = [line.split()[0] for line in body.splitlines() if line.strip()]
    if not cmds:
        sys.exit(f"no commands found in `ferry --help`:\n{out}")
    return cmds


def help_flags(ferry, cmd):
    """Flags of the option column: lines of the Options block that start with '-'."""
    flags = set()
    in_options = False
    for line in run(ferry, cmd, "--help").splitlines():
        if line.startswith("Options:"):
            in_options = True
            continue
        if in_options and line and not line[0].isspace():
            in_options = False  # a following block (none today)
        stripped = line.strip()
        if not in_options or not stripped.startswith("-"):
            continue
        names = stripped.split()[0]  # "-m,--model" or "--temp"
        for name in names.split(","):
            m = FLAG.fullmatch(name) or FLAG.match(name)
            if m:
                flags.add(m.group(1))
    if not flags:
        sys.exit(f"no flags parsed from `ferry {cmd} --help`")
    return flags


def sections(doc):
    out = {}
    title = None
    for line in doc.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            out[title] = []
        elif title is not None:
            out[title].append(line)
    return {t: "\n".join(body) for t, body in out.items()}


def documented(text):
    return set(FLAG.findall(text))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ferry, doc_path = sys.argv[1], sys.argv[2]
    with open(doc_path, encoding="utf-8") as f:
        secs = sections(f.read())
    shared = {t.split(":", 1)[1].strip(): body for t, body in secs.items() if t.startswith("Shared:")}
    any_shared = set().union(*(documented(b) for b in shared.values())) if shared else set()
    missing = []
    for cmd in commands(ferry):
        own = secs.get(f"ferry {cmd}")
        if own is None:
            missing.append(f"ferry {cmd}: no section '## ferry {cmd}' in {doc_path}")
            continue
        allowed = documented(own)
        m = re.search(r"^Also takes:(.*)$", own, re.MULTILINE)
        for group in re.findall(r"`([\w-]+)`", m.group(1)) if m else []:
            if group not in shared:
                missing.append(f"ferry {cmd}: 'Also takes' names `{group}`, which has no '## Shared: {group}'")
                continue
            allowed |= documented(shared[group])
        for flag in sorted(help_flags(ferry, cmd)):
            if flag in allowed or (flag in ("-h", "--help") and flag in any_shared):
                continue
            missing.append(f"ferry {cmd}: {flag} is not documented in {doc_path}")
    for line in missing:
        print(line)
    if missing:
        print(f"{len(missing)} flag(s) missing: add them to {doc_path} (default, and why where it chooses an implementation)")
        return 1
    print(f"every flag of {len(commands(ferry))} commands is documented in {doc_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
