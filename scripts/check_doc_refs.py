#!/usr/bin/env python3
"""Check that every reference to a section of the repository's docs resolves.

    python3 scripts/check_doc_refs.py [ROOT]      # ROOT: a git checkout (default: this one)

Source comments, scripts, tests and docs point readers at sections by name:
`docs/fp8.md, "Layout"`, `fp8.md ("Speed")`, `docs/engine.md, "The chain" and "Checkpoints"`,
`README's "More ranks, more nodes"`. A reference names a file (any docs/NAME.md, or the
README) and one or more quoted names; it may wrap over comment lines (the comment markers at
the starts of lines are dropped before matching). It resolves when a heading of that file
starts with the quoted name (a paragraph's bold lead-in, **One launch per shard.**, counts as a
heading). `NAME.md's "text"` quotes a passage rather than a heading: it
resolves when the file contains the text (case and line breaks aside).

Prints each broken reference with the file that holds it, then a count; exits 1 when any is
broken, 0 otherwise. Every tracked text file is read (`git ls-files`).
"""
import os
import re
import subprocess
import sys

# A file name, an optional possessive, a separator, then quoted names ("X", "Y" and "Z").
REF = re.compile(r"\b(README|[A-Za-z0-9_]+\.md)('s)?(, ?\(?| \(?)((?:\"[^\"]{1,200}\"(?:,? (?:and |or )?)?)+)")
QUOTED = re.compile(r"\"([^\"]+)\"")
COMMENT_START = re.compile(r"^\s*(//+|#+(?!#)|\*|/\*+|\"\"\"|--)?\s*")
SKIP_SUFFIXES = (".svg", ".tsv", ".png", ".bin", ".json", ".txt")


def norm(s):
    return " ".join(s.split())


def joined(text):
    """The text with comment markers at line starts removed and its lines joined by spaces."""
    return " ".join(COMMENT_START.sub("", line) for line in text.split("\n"))


BOLD_LEAD = re.compile(r"^\*\*([^*]+?)\.?\*\*")


def headings(path):
    """The file's headings, and the bold lead-ins that title its paragraphs (**One launch per shard.**)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                out.append(norm(line.lstrip("#")))
            elif (m := BOLD_LEAD.match(line)):
                out.append(norm(m.group(1)))
    return out


def doc_path(root, name):
    """The file a reference names, relative to root, or None when it is not a doc of this repository."""
    if name == "README":
        name = "README.md"
    for candidate in (name, os.path.join("docs", name)):
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def tracked_files(root):
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    return out.split()


def check_references(root):
    """(how many references there are, [(file, reference)] for each that does not resolve)."""
    heads, texts, broken = {}, {}, []
    checked = 0
    for f in tracked_files(root):
        if f.endswith(SKIP_SUFFIXES):
            continue
        try:
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                raw = fh.read()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        if ".md" not in raw and "README" not in raw:
            continue
        for m in REF.finditer(joined(raw)):
            name, possessive = m.group(1), m.group(2)
            path = doc_path(root, name)
            if path is None:
                continue  # another project's file (a CHANGELOG.md of a dependency, say)
            if path not in heads:
                heads[path] = headings(os.path.join(root, path))
                with open(os.path.join(root, path), encoding="utf-8") as fh:
                    texts[path] = norm(fh.read()).lower()
            for q in QUOTED.findall(m.group(4)):
                q = norm(q)
                checked += 1
                if possessive:
                    ok = q.lower() in texts[path]
                else:
                    ok = any(h.startswith(q) for h in heads[path])
                if not ok:
                    broken.append((f, f'{name}{possessive or ""} "{q}"'))
    return checked, broken


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checked, broken = check_references(root)
    for f, ref in broken:
        print(f"{f}: {ref}: no such section")
    print(f"{checked} references to sections of the docs, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
