"""What the source checkers of this folder share: a scratch tree for their self-tests, and the
command-line shape (self-test, then print every violation and exit 1 when any exists)."""
import os
import sys


def write_tree(root, files):
    """Writes {relative path: text} under root, making the folders."""
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main(self_test, violations):
    self_test()
    found = violations(sys.argv[1] if len(sys.argv) > 1 else ".")
    for line in found:
        print(line)
    return 1 if found else 0
