"""What the source checkers of this folder share: a scratch tree for their self-tests, and the
command-line shape (self-test, then print every violation and exit 1 when any exists)."""
import os
import sys


def source_lines(root, tops, suffixes):
    """(repo-relative path, line number, line) of every file below root/top for top in tops whose
    name ends with one of suffixes, files in name order."""
    for top in tops:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(suffixes):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                with open(full, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        yield rel, n, line


def write_tree(root, files):
    """Writes {relative path: text} under root, making the folders."""
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def tree_violations(files, violations):
    """violations(root) of a scratch tree holding files ({relative path: text}), for self-tests."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        write_tree(d, files)
        return violations(d)


def main(self_test, violations):
    self_test()
    found = violations(sys.argv[1] if len(sys.argv) > 1 else ".")
    for line in found:
        print(line)
    return 1 if found else 0
