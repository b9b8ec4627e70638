#!/usr/bin/env python3
"""Map mutant names of an earlier tree onto the current tree's: issue 22 part 3, docs/chaos.md.

Usage: scripts/mutants-map.py OLD_TREE NEW_TREE SAMPLE NEW_POPULATION > MAPPED
  OLD_TREE        a checkout of the tree the sample was drawn from (a `git worktree`)
  NEW_TREE        the current tree
  SAMPLE          the earlier sample, `INDEX<TAB>NAME` lines (scripts/mutants.sh's sample.tsv)
  NEW_POPULATION  `cargo mutants --list` of the current tree, the same files (population.txt)

A name is `FILE:LINE:COL: DESCRIPTION`. Its counterpart is a mutant of the current population
with the same file and the same description (the mutation and its function), on the line
that the old line became: the old line is carried through a line diff of the two files
(difflib), and among the candidates the one whose line text equals the old line's text, then
the nearest to the carried line, then the nearest column, is taken.

Output, one line per sample entry: INDEX, the new name, and a note: `same-text` (the mutated
line's text is identical), `other-text` (it changed: look at it), `renamed` (no mutant of that
file and description, but the same mutation on a line of the same text in a function of another
name: the function was renamed or the line moved into another one; look at it), or `none` (no
such mutant: the mutant is gone). Exit status 0; the notes say what to check.
"""

import difflib
import re
import sys

NAME = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<desc>.*)$")


def parse(name):
    m = NAME.match(name)
    if not m:
        sys.exit(f"not a mutant name: {name!r}")
    return m["file"], int(m["line"]), int(m["col"]), m["desc"]


def lines(tree, path):
    with open(f"{tree}/{path}", encoding="utf-8") as f:
        return f.read().split("\n")


def carry(old, new):
    """Old line number (1-based) -> the new line it became, or the nearest one kept before it."""
    to_new = {}
    for a, b, size in difflib.SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks():
        for k in range(size):
            to_new[a + k + 1] = b + k + 1

    def at(n):
        if n in to_new:
            return to_new[n]
        # A changed line: place it after the last kept line above it.
        before = [k for k in to_new if k < n]
        return to_new[max(before)] + (n - max(before)) if before else n

    return at


def context(lines_, n, k=5):
    """The stripped lines around line n (1-based), without line n."""
    lo, hi = max(0, n - 1 - k), min(len(lines_), n + k)
    return [lines_[j].strip() for j in range(lo, hi) if j != n - 1]


def likeness(a, b):
    """How many lines two neighbourhoods share (as multisets)."""
    rest = list(b)
    n = 0
    for x in a:
        if x in rest:
            rest.remove(x)
            n += 1
    return n


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    old_tree, new_tree, sample_path, population_path = sys.argv[1:]
    population = {}
    with open(population_path, encoding="utf-8") as f:
        for name in f.read().splitlines():
            file, line, col, desc = parse(name)
            population.setdefault((file, desc), []).append((line, col, name))
    files = {}
    new_files = sorted({file for (file, _desc) in population})

    def successors(file):
        """The files of the new tree that hold an old file's code: itself, or the files under the
        directory it was split into."""
        try:
            open(f"{new_tree}/{file}", encoding="utf-8").close()
            return [file], False
        except FileNotFoundError:
            stem = file[: -len(".rs")] + "/" if file.endswith(".rs") else file + "/"
            return [f for f in new_files if f.startswith(stem)], True

    with open(sample_path, encoding="utf-8") as f:
        for entry in f.read().splitlines():
            index, name = entry.split("\t", 1)
            file, line, col, desc = parse(name)
            if file not in files:
                old = lines(old_tree, file)
                succ, moved = successors(file)
                news = {}
                for nf in succ:
                    new = lines(new_tree, nf)
                    news[nf] = (new, carry(old, new))
                files[file] = (old, moved, news)
            old, moved, news = files[file]
            text = old[line - 1].strip()
            around = context(old, line)
            candidates = [
                (nf, c[0], c[1], c[2]) for nf in news for c in population.get((nf, desc), [])
            ]
            renamed = False
            if not candidates and " in " in desc:
                # The function was renamed, or its line moved into another function (a body
                # moved into `step_into`, a filter into a helper): the same mutation of a line of
                # the same text in a function of another name. Same text only: anything else is
                # not the same mutant.
                what = desc.rsplit(" in ", 1)[0]
                candidates = [
                    (nf, c[0], c[1], c[2])
                    for (pf, pdesc), cs in population.items()
                    if pf in news and " in " in pdesc and pdesc.rsplit(" in ", 1)[0] == what
                    for c in cs
                    if news[pf][0][c[0] - 1].strip() == text
                    for nf in [pf]
                ]
                renamed = bool(candidates)
            if not candidates:
                print(f"{index}\t\tnone\t{name}")
                continue

            def key(c):
                nf, cl, cc, _ = c
                new, at = news[nf]
                return (
                    new[cl - 1].strip() != text,
                    -likeness(around, context(new, cl)) if moved else 0,
                    abs(cl - at(line)),
                    abs(cc - col),
                )

            best = min(candidates, key=key)
            new = news[best[0]][0]
            note = "same-text" if new[best[1] - 1].strip() == text else "other-text"
            if note == "other-text" and " in " in desc and not renamed:
                # A mutation inside a function on a line that changed: the mutated operator must
                # keep a neighbour, its text just before or just after it, or it is another
                # operator of the same kind (`*c == live` rewritten as a call while `*l == lease`
                # beside it stayed): the old one is gone.
                def beside(s, c, k=6):
                    return s[max(0, c - 1 - k) : c - 1], s[c - 1 : c - 1 + k + 4]

                ob, oa = beside(old[line - 1], col)
                nb, na = beside(new[best[1] - 1], best[2])
                if ob != nb and oa != na:
                    print(f"{index}\t\tnone\t{name}")
                    continue
            if renamed:
                note = "renamed"
            print(f"{index}\t{best[3]}\t{note}\t{name}")


if __name__ == "__main__":
    main()
