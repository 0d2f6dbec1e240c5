#!/usr/bin/env python3
"""Checks the user documentation: every relative link in README.md and docs/*.md resolves (the
file exists; a #fragment names a heading of the target page), and no page, nor any other text
file under docs/ (kept logs) or examples/, names an absolute path of a build machine (/work/,
/root/, /home/).

    check_links.py SOURCE_DIR            exit 0 when all is well, 1 with one line per problem
    check_links.py --self-test           a page with each kind of problem must fail the check
"""
import os
import re
import sys
import tempfile

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
MACHINE_PATH = re.compile(r"(?<![\w.])/(work|root|home)/\S")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    found, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                found.add(slug(line.lstrip("#")))
    return found


def pages(root):
    out = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    out += sorted(os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md"))
    return out


def other_text_files(root):
    """Every file under docs/ and examples/ but the pages, that reads as UTF-8 text."""
    out = []
    for top in ("docs", "examples"):
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                path = os.path.join(d, n)
                if path in pages(root):
                    continue
                try:
                    with open(path, encoding="utf-8") as f:
                        f.read()
                except (UnicodeDecodeError, OSError):
                    continue  # images
                out.append(path)
    return sorted(out)


def check(root):
    problems = []
    for path in other_text_files(root):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if MACHINE_PATH.search(line):
                    problems.append(f"{os.path.relpath(path, root)}:{n}: an absolute path of a build machine: "
                                    f"{line.strip()[:100]}")
    for page in pages(root):
        rel = os.path.relpath(page, root)
        fenced = False
        with open(page, encoding="utf-8") as f:
            lines = f.readlines()
        for n, line in enumerate(lines, 1):
            if FENCE.match(line):
                fenced = not fenced
            if MACHINE_PATH.search(line):
                problems.append(f"{rel}:{n}: an absolute path of a build machine: {line.strip()[:100]}")
            if fenced:
                continue
            for m in LINK.finditer(line):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path, _, fragment = target.partition("#")
                dest = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
                if not os.path.exists(dest):
                    problems.append(f"{rel}:{n}: link to {target}: no such file")
                elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                    problems.append(f"{rel}:{n}: link to {target}: no heading with that anchor")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, "docs"))
        with open(os.path.join(root, "docs", "a.md"), "w") as f:
            f.write("# Page A\n## Some heading\n")
        good = "[a](docs/a.md) [h](docs/a.md#some-heading) [web](https://example.org)\n"
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write(good)
        if check(root):
            print("self-test: a clean page was reported:", check(root))
            return 1
        for bad in ("[b](docs/missing.md)\n", "[h](docs/a.md#no-such-heading)\n", "see /work/main/build/bin\n"):
            with open(os.path.join(root, "README.md"), "w") as f:
                f.write(good + bad)
            if not check(root):
                print(f"self-test: not detected: {bad.strip()}")
                return 1
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write(good)
        os.makedirs(os.path.join(root, "docs", "logs"))
        with open(os.path.join(root, "docs", "logs", "run.log"), "w") as f:
            f.write("#2 main from /home/user/lockstep/examples/x.py:9\n")
        if not check(root):
            print("self-test: not detected: a machine path in a log under docs/")
            return 1
    print("self-test: every kind of problem detected")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = check(root)
    for p in problems:
        print(p)
    print(f"{len(pages(root))} pages checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
