#!/usr/bin/env python3
"""Fails when an #include runs against the libraries' declared dependencies.

Every library and executable of the build is declared with shardsim_target()
(the top-level CMakeLists.txt), which records each target's sources, headers
and DEPENDS in <build>/layering.json. This check holds the code to them:

  1. every .h, .cpp and .cu file under topology/, workloads/, calib/ and sim/
     belongs to exactly one target, so no file escapes the rules below;
  2. every #include "folder/file.h" of a project header names a header of the
     including file's own target or of a target it depends on, directly or
     through others;
  3. the declared dependencies have no cycle and run one way between the
     top-level folders: sim -> calib -> workloads -> topology (a target may
     depend on targets of its own folder or of folders to its right);
  4. code asks a plan's sharding system what it does, never which one it is:
     no comparison with a ShardingSystem value outside the registry
     (workloads/inputs/sharding_systems.*) and plan parsing
     (workloads/inputs/plan.cpp), so a new system is a registry record.

Usage:
  check_layering.py SOURCE_DIR MANIFEST   prints each violation, exit 1 if any
  check_layering.py --self-test           plants violations in a scratch tree
                                          and requires the check to find each
"""
import json
import os
import re
import sys
import tempfile

FOLDERS = ["topology", "workloads", "calib", "sim"]  # bottom first
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".h", ".cpp", ".cu")
SYSTEM_COMPARISON = re.compile(r"(==|!=)\s*(\w+::)*ShardingSystem::|ShardingSystem::\w+\s*(==|!=)|"
                               r"case\s+(\w+::)*ShardingSystem::")
MAY_NAME_SYSTEMS = ("workloads/inputs/sharding_systems.h", "workloads/inputs/sharding_systems.cpp",
                    "workloads/inputs/plan.cpp")


def folder_rank(path):
    top = path.split("/", 1)[0]
    return FOLDERS.index(top) if top in FOLDERS else None


def violations(source_dir, manifest):
    problems = []
    targets = {t["name"]: t for t in manifest["targets"]}
    owner = {}
    for t in manifest["targets"]:
        for f in t["sources"] + t["headers"]:
            if f in owner and owner[f] != t["name"]:
                problems.append(f"{f}: in two targets, {owner[f]} and {t['name']}")
            owner[f] = t["name"]

    # 1. Every source file has a target.
    project_files = []
    for top in FOLDERS:
        for root, _, names in os.walk(os.path.join(source_dir, top)):
            for name in names:
                if name.endswith(SOURCE_SUFFIXES):
                    project_files.append(os.path.relpath(os.path.join(root, name), source_dir))
    for f in sorted(project_files):
        if f not in owner:
            problems.append(f"{f}: belongs to no target; add it to SOURCES or HEADERS of one in its CMakeLists.txt")

    # 3. Declared dependencies: known, acyclic, one way between folders.
    for t in manifest["targets"]:
        for d in t["depends"]:
            if d not in targets:
                problems.append(f"{t['name']}: DEPENDS on {d}, which is not a shardsim target")
                continue
            here, there = folder_rank(t["folder"]), folder_rank(targets[d]["folder"])
            if here is not None and there is not None and there > here:
                problems.append(f"{t['name']} ({t['folder']}) depends on {d} ({targets[d]['folder']}): "
                                f"dependencies run {' -> '.join(reversed(FOLDERS))}")
            if targets[d]["kind"] == "EXECUTABLE":
                problems.append(f"{t['name']}: depends on the executable {d}")
    state = {}

    def visit(name, stack):
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            cycle = stack[stack.index(name):] + [name]
            problems.append("dependency cycle: " + " -> ".join(cycle))
            return
        state[name] = "open"
        for d in targets[name]["depends"]:
            if d in targets:
                visit(d, stack + [name])
        state[name] = "done"

    for name in sorted(targets):
        visit(name, [])

    closure = {}

    def reachable(name, seen=None):
        if name in closure:
            return closure[name]
        seen = seen or set()
        result = {name}
        for d in targets[name]["depends"]:
            if d in targets and d not in seen:
                result |= reachable(d, seen | {name})
        closure[name] = result
        return result

    # 2. Includes follow the declared dependencies.
    for f in sorted(project_files):
        if f not in owner:
            continue
        allowed = reachable(owner[f])
        with open(os.path.join(source_dir, f), encoding="utf-8") as text:
            content = text.read()
        for match in INCLUDE.finditer(content):
            header = match.group(1)
            if folder_rank(header) is None:
                continue  # a system or third-party header
            line = content.count("\n", 0, match.start()) + 1
            if header not in owner:
                problems.append(f"{f}:{line}: includes {header}, which no target declares")
            elif owner[header] not in allowed:
                problems.append(f"{f}:{line}: includes {header} of {owner[header]}, which {owner[f]} does not "
                                f"depend on (it may use: {', '.join(sorted(allowed))})")
        # 4. Systems are asked what they do.
        if f not in MAY_NAME_SYSTEMS:
            for match in SYSTEM_COMPARISON.finditer(content):
                line = content.count("\n", 0, match.start()) + 1
                problems.append(f"{f}:{line}: compares a plan's sharding system; ask the registry what it does "
                                "(behaviour_of, workloads/inputs/sharding_systems.h)")
    return problems


def self_test():
    """The check must find what it exists to find."""
    def tree(files, targets):
        root = tempfile.mkdtemp(prefix="layering-")
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as out:
                out.write(text)
        return root, {"targets": targets}

    def target(name, folder, sources, headers=(), depends=(), kind="LIBRARY"):
        return {"name": name, "kind": kind, "folder": folder, "sources": list(sources), "headers": list(headers),
                "depends": list(depends)}

    base = {"topology/base/units.h": "", "topology/cluster.h": '#include "topology/base/units.h"\n',
            "topology/cluster.cpp": '#include "topology/cluster.h"\n', "sim/engine.h": "",
            "sim/engine.cpp": '#include "sim/engine.h"\n#include "topology/cluster.h"\n#include <vector>\n'}
    good = [target("base", "topology/base", [], ["topology/base/units.h"]),
            target("topo", "topology", ["topology/cluster.cpp"], ["topology/cluster.h"], ["base"]),
            target("engine", "sim", ["sim/engine.cpp"], ["sim/engine.h"], ["topo"])]
    root, manifest = tree(base, good)
    assert violations(root, manifest) == [], violations(root, manifest)

    upward = dict(base, **{"topology/cluster.cpp": '#include "topology/cluster.h"\n#include "sim/engine.h"\n'})
    root, manifest = tree(upward, good)
    found = violations(root, manifest)
    assert any("topology/cluster.cpp:2: includes sim/engine.h of engine" in p for p in found), found

    orphan = dict(base, **{"sim/stray.cpp": ""})
    root, manifest = tree(orphan, good)
    assert any("sim/stray.cpp: belongs to no target" in p for p in violations(root, manifest))

    backwards = [dict(t) for t in good]
    backwards[1] = target("topo", "topology", ["topology/cluster.cpp"], ["topology/cluster.h"], ["base", "engine"])
    root, manifest = tree(base, backwards)
    found = violations(root, manifest)
    assert any("topo (topology) depends on engine (sim)" in p for p in found), found
    assert any(p.startswith("dependency cycle") for p in found), found

    undeclared = dict(base, **{"sim/engine.cpp": '#include "topology/missing.h"\n'})
    root, manifest = tree(undeclared, good)
    assert any("includes topology/missing.h, which no target declares" in p for p in violations(root, manifest))
    asks = dict(base, **{"sim/engine.cpp": "bool f(Plan p) { return p.system == ShardingSystem::mics; }\n"})
    root, manifest = tree(asks, good)
    assert any("sim/engine.cpp:1: compares a plan's sharding system" in p for p in violations(root, manifest))
    print("check_layering self-test: every planted violation found")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[2]) as f:
        manifest = json.load(f)
    problems = violations(sys.argv[1], manifest)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering violation(s); targets and their DEPENDS are declared with "
              "shardsim_target() in the CMakeLists.txt files")
        return 1
    print(f"layering: {len(manifest['targets'])} targets, every include follows their declared dependencies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
