#!/usr/bin/env python3
"""The demo's package list covers what its configure finds (README: "installs only what building
needs"). A machine with the test packages installed builds the demo whatever scripts/setup.sh's
short list says, so CI would not see a missing package; a fresh machine stops at configure
(it did: libunwind-ptrace for `lockstep attach`, from libunwind-dev).

Configures the demo (scripts/build.sh --demo, configure only) into a scratch folder, maps every
library, header and CMake package file the cache names under /usr to its Debian package
(dpkg -S), and checks that each is one of setup.sh's demo packages or something they depend on
(installed Depends, followed recursively).

usage: setup_covers_demo.py REPO SCRATCH_DIR"""
import os
import re
import shutil
import subprocess
import sys


def setup_packages(repo):
    """The demo's package list: the `pkgs=(...)` array of scripts/setup.sh, before `--test`."""
    text = open(os.path.join(repo, "scripts", "setup.sh"), encoding="utf-8").read()
    m = re.search(r"^pkgs=\((.*?)\)", text, re.S | re.M)
    if not m:
        sys.exit("setup_covers_demo: no pkgs=(...) in scripts/setup.sh")
    words = re.sub(r"#[^\n]*", "", m.group(1)).split()
    return set(words)


def depends_closure(pkgs):
    """pkgs and every installed package they depend on (Depends and Pre-Depends, alternatives
    included), recursively."""
    seen, todo = set(), list(pkgs)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        r = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}\n", p],
                           capture_output=True, text=True)
        if r.returncode:
            continue
        for dep in re.split(r"[,|]", r.stdout):
            name = dep.strip().split(" ")[0].split(":")[0]
            if name and name not in seen:
                todo.append(name)
    return seen


def owner(path):
    r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    if r.returncode:
        return None
    return r.stdout.split(":")[0].split(",")[0].strip()


def main():
    repo, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    env = dict(os.environ, BUILD_DIR=scratch, LOCKSTEP_CONFIGURE_ONLY="1")
    r = subprocess.run(["bash", os.path.join(repo, "scripts", "build.sh"), "--demo"], env=env,
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"setup_covers_demo: the demo's configure failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    allowed = depends_closure(setup_packages(repo))
    checked, missing = 0, []
    for line in open(os.path.join(scratch, "CMakeCache.txt"), encoding="utf-8"):
        m = re.match(r"^([A-Za-z0-9_]+):(FILEPATH|PATH)=(/usr/.*)$", line.strip())
        if not m or m.group(1).startswith("CMAKE_"):
            continue
        name, kind, path = m.groups()
        if kind == "PATH":
            # A package's CMake config folder: its *Config.cmake file says which package it is.
            configs = [f for f in os.listdir(path) if f.endswith("Config.cmake") or f.endswith("-config.cmake")] \
                if name.endswith("_DIR") and os.path.isdir(path) else []
            if not configs:
                continue  # a shared include folder (/usr/include) names no one package
            path = os.path.join(path, configs[0])
        # The name configure found first: a -dev package owns the .so link, a runtime package its target.
        pkg = owner(path) or owner(os.path.realpath(path))
        if pkg is None:
            continue  # not from a Debian package (a toolkit in /usr/local, a pyenv shim)
        checked += 1
        if pkg not in allowed:
            missing.append(f"{name} = {path} (package {pkg})")
    if checked == 0:
        sys.exit("setup_covers_demo: the demo's cache names no file of a Debian package: nothing checked")
    if missing:
        print("scripts/setup.sh's demo packages do not install what the demo's configure found:")
        for m in missing:
            print("  " + m)
        return 1
    print(f"setup_covers_demo: {checked} files the demo's configure found, each from a demo package "
          f"or its dependencies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
