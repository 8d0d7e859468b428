#!/usr/bin/env python3
"""Checks that the library's sources keep their layer order.

Why: a lower layer never names a higher one. A layer can then be understood, tested and replaced
with only the layers below it in mind, and nothing low moves when something high changes. An
upper layer that must let a lower one act (the executors realizing a lazy tensor that core hands
out, autograd recording ops, the profiler timing kernels) registers a hook at start-up; the lower
layer calls through the hook and never names the upper one. Peer components of one row (nn, optim,
data, ...) do not name each other either.

What it checks, for every .c/.h/.def under src/ (each must match a component of LAYERS):
  * include edges: #include "x/y.h" (resolved against the file's own directory, then src/);
  * call/reference edges (with --objects): `nm` on the eagle_objects object files; a symbol one
    object leaves undefined (U) and another defines is an edge between their source files. This
    catches calls made through locally written `extern` declarations;
  * backend privacy: no file outside src/backend/cpu/ (in src/ or tools/) includes backend/cpu/,
    and none outside src/backend/cuda/ includes backend/cuda/ (the CUDA backend's .cu device code
    is checked like its C);
    tests/ and bench/ files that do are listed as information only (white-box tests);
  * tools/ includes only eagle.h / eagle/..., its own headers and system headers.
An edge is free within a component and towards a lower row; towards a different component of the
same row or any higher row it is a violation, unless listed in ALLOWED.
Exit status: 0 clean, 1 violations, 2 usage errors (no nm, no objects, a file in no component).
"""
import argparse, fnmatch, os, re, shutil, subprocess, sys
from collections import defaultdict

# Bottom row first. A row is (row name, [(component, [patterns relative to src/])]). A pattern
# ending in "/" is a directory prefix, one with * ? [ a glob, anything else a single file. A file
# takes the most specific pattern that matches: file > glob > directory, then the longer one.
LAYERS = [
    ("base", [("base", ["base/"])]),                  # errors, threads, CPU features, id maps
    ("mem", [("mem", ["mem/"])]),
    ("device", [("device", ["device/"])]),    # device interface, host memory spaces, scopes
    ("core", [("core", ["core/"])]),
    ("ops", [("ops", ["ops/ops.def", "ops/infer.c", "ops/registry.c", "ops/internal.h",
                      "ops/schema*"])]),       # the op schema only
    ("backend", [("backend", ["backend/backend.h"]),   # the shared backend header
                 ("backend_cpu", ["backend/cpu/"]),
                 ("backend_cuda", ["backend/cuda/"])]),
    ("dispatch", [("dispatch", ["dispatch/"])]),        # device registry, eg__launch
    ("exec", [("exec", ["exec/", "eager/", "lazy/", "graph/"])]),    # the three executors
    ("api", [("api", ["api/"])]),                   # the public op builders
    ("autograd", [("autograd", ["autograd/"])]),     # tapes, backward rules, variables
    ("io", [("io", ["io/"])]),                       # file formats, which pipelines and the
                                                     # profiler's outputs write and read
    # Tokenizers: above io (tokenizer.json is read and written there, the corpus files too) and
    # below the library's top row rather than in it, so that data/ (a tokenized text source),
    # nn/ and the trainer may all tokenize; peers of one row could not call it. It needs nothing
    # of the top row: text in, ids (or an id tensor) out.
    ("text", [("text", ["text/"])]),
    ("upper", [("nn", ["nn/"]), ("optim", ["optim/"]), ("data", ["data/"]),
               ("profiler", ["profiler/"]), ("dist", ["dist/"])]),
    ("train", [("train", ["train/"])]),  # fit/evaluate/predict: composes nn, optim, data, io
]

# Edges that would be violations but are meant: (from_component, to_component, reason).
ALLOWED = [
    ("backend_cpu", "backend", "backend/backend.h is the interface every backend implements"),
    ("backend_cuda", "backend", "backend/backend.h is the interface every backend implements"),
]

SOURCE_EXTS = (".c", ".h", ".def", ".cu", ".cuh")
PRIVATE_BACKENDS = ("backend/cpu/", "backend/cuda/")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class UsageError(Exception):
    pass


def component_rows():
    """component -> row index, and the components in table order."""
    rows = {}
    for index, (_, comps) in enumerate(LAYERS):
        for name, _ in comps:
            rows[name] = index
    return rows


def component_of(rel):
    """The component whose most specific pattern matches src-relative path rel, or None."""
    matches = []
    for _, comps in LAYERS:
        for name, patterns in comps:
            for pattern in patterns:
                if pattern.endswith("/"):
                    hit, kind = rel.startswith(pattern), 0
                elif any(c in pattern for c in "*?["):
                    hit, kind = fnmatch.fnmatchcase(rel, pattern), 1
                else:
                    hit, kind = rel == pattern, 2
                if hit:
                    matches.append(((kind, len(pattern)), name))
    if not matches:
        return None
    best = max(rank for rank, _ in matches)
    names = {name for rank, name in matches if rank == best}
    if len(names) > 1:
        raise UsageError(f"src/{rel} matches {sorted(names)} equally well; fix LAYERS")
    return names.pop()


def walk(top, exts):
    """Paths (relative to top, with /) of the files under top whose names end in exts."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for filename in sorted(filenames):
            if filename.endswith(exts):
                path = os.path.relpath(os.path.join(dirpath, filename), top)
                found.append(path.replace(os.sep, "/"))
    return found


def includes(path):
    """(kind, name) of each #include in the file: kind is '"' or '<'."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return [(m.group(1), m.group(2).strip()) for m in map(INCLUDE_RE.match, f) if m]


def is_public(name):
    return name == "eagle.h" or name.startswith("eagle/")


def resolve_in_src(src, rel_dir, kind, name):
    """src-relative path the include names, or None (public, system or not found)."""
    if is_public(name):
        return None
    bases = [rel_dir, ""] if kind == '"' else [""]   # src/ is on the library's include path
    for base in bases:
        rel = os.path.normpath(os.path.join(base, name)).replace(os.sep, "/")
        if not rel.startswith("../") and os.path.isfile(os.path.join(src, rel)):
            return rel
    return None


def read_objects(objects, src, nm):
    """source -> [symbol] undefined, symbol -> [(source, type)] defined, stale objects (no
    source under src/), and the sources that have an object."""
    paths = walk(objects, (".o", ".obj"))
    if not paths:
        raise UsageError(f"no object files under {objects}")
    undefined, defined, stale, built = defaultdict(list), defaultdict(list), [], set()
    for path in paths:
        parts = path.split("/")
        rel = "/".join(parts[parts.index("src") + 1:] if "src" in parts else parts)
        rel = re.sub(r"\.(o|obj)$", "", rel)
        if not os.path.isfile(os.path.join(src, rel)):
            stale.append(path)
            continue
        built.add(rel)
        out = subprocess.run([nm, "-P", os.path.join(objects, path)], capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 2:
                continue
            symbol, kind = fields[0], fields[1]
            if kind in "Uwv":
                undefined[rel].append(symbol)
            elif kind.isupper() or kind in "iu":
                defined[symbol].append((rel, kind))
    return undefined, defined, stale, built


def call_lines(calls, verbose):
    """One line per (file, verb, defining file), or with verbose one per symbol."""
    grouped = defaultdict(list)
    for rel, verb, symbol, target in calls:
        grouped[(rel, verb, target)].append(symbol)
    lines = set()
    for (rel, verb, target), symbols in grouped.items():
        symbols.sort()
        if verbose or len(symbols) == 1:
            lines.update(f"{rel} {verb} {s} (defined in {target})" for s in symbols)
        elif len(symbols) <= 4:
            lines.add(f"{rel} {verb} {', '.join(symbols)} (defined in {target})")
        else:
            lines.add(f"{rel} {verb} {', '.join(symbols[:3])} and {len(symbols) - 3} more "
                      f"(defined in {target}; --verbose lists them)")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", default=os.path.join(ROOT, "src"))
    parser.add_argument("--objects", help="object dir of eagle_objects (…/CMakeFiles/eagle_objects.dir)")
    parser.add_argument("--tools", default=os.path.join(ROOT, "tools"))
    parser.add_argument("--nm", default=os.environ.get("NM", "nm"))
    parser.add_argument("--verbose", action="store_true", help="one line per called symbol")
    args = parser.parse_args()
    src = os.path.abspath(args.src)
    if not os.path.isdir(src):
        raise UsageError(f"--src {args.src} is not a directory")
    rows = component_rows()
    allowed = {(a, b) for a, b, _ in ALLOWED}
    files = walk(src, SOURCE_EXTS)
    comp = {rel: component_of(rel) for rel in files}
    unmatched = [rel for rel in files if comp[rel] is None]
    if unmatched:
        raise UsageError("files in no layer component (place them in LAYERS): "
                         + ", ".join("src/" + rel for rel in unmatched))

    layer_lines = defaultdict(set)   # (from, to) -> lines
    calls = defaultdict(set)         # (from, to) -> (file, verb, symbol, defining file)
    privacy, tools_lines, info, notes = set(), set(), set(), []

    def edge(a, b):
        return a != b and rows[b] >= rows[a] and (a, b) not in allowed

    n_includes = 0
    for rel in files:
        for kind, name in includes(os.path.join(src, rel)):
            target = resolve_in_src(src, os.path.dirname(rel), kind, name)
            if target is None:
                continue
            n_includes += 1
            to = comp.get(target) or component_of(target)
            if to is None:
                raise UsageError(f"src/{target} (included by src/{rel}) is in no component")
            if edge(comp[rel], to):
                layer_lines[(comp[rel], to)].add(f"{rel} includes {target}")
            for private in PRIVATE_BACKENDS:
                if target.startswith(private) and not rel.startswith(private):
                    privacy.add(f"src/{rel} includes {target}")

    n_calls = 0
    if args.objects:
        nm = shutil.which(args.nm)
        if nm is None:
            raise UsageError(f"'{args.nm}' not found (needed for --objects)")
        if not os.path.isdir(args.objects):
            raise UsageError(f"--objects {args.objects} is not a directory")
        undefined, defined, stale, built = read_objects(os.path.abspath(args.objects), src, nm)
        for path in stale:
            notes.append(f"note: {path} has no source under {src} (stale object, skipped)")
        for symbol, defs in sorted(defined.items()):
            if len({d for d, _ in defs}) > 1:
                notes.append(f"note: {symbol} is defined in " + ", ".join(
                    f"{d} ({k})" for d, k in sorted(defs)))
        for rel, symbols in undefined.items():
            for symbol in set(symbols):
                defs = defined.get(symbol, [])
                strong = [d for d in defs if d[1] not in "WV"] or defs
                for target, kind in strong:
                    if target == rel:
                        continue
                    n_calls += 1
                    if edge(comp[rel], comp[target]):
                        verb = "calls" if kind in "TtWi" else "references"
                        calls[(comp[rel], comp[target])].add((rel, verb, symbol, target))
        for rel in files:
            if rel.endswith(".c") and rel not in built:
                notes.append(f"note: src/{rel} has no object (not built?); its calls are unchecked")
        for key, edges in calls.items():
            layer_lines[key] |= call_lines(edges, args.verbose)
    else:
        notes.append("note: no --objects given: include checks only, call edges not checked")

    tools = os.path.abspath(args.tools)
    tools_files = walk(tools, (".c", ".h")) if os.path.isdir(tools) else []
    tools_shown = os.path.basename(tools)
    for rel in tools_files:
        here = os.path.dirname(os.path.join(tools, rel))
        for kind, name in includes(os.path.join(tools, rel)):
            shown = f"{tools_shown}/{rel} includes {name}"
            local = os.path.normpath(os.path.join(here, name))
            in_src = resolve_in_src(src, "", "<", name) or (
                os.path.isfile(local) and local.startswith(src + os.sep))
            if any(private in name for private in PRIVATE_BACKENDS):
                privacy.add(shown)
            elif is_public(name):
                continue
            elif in_src:
                tools_lines.add(shown + " (a src/ internal header)")
            elif kind == '"' and not (os.path.isfile(local) and local.startswith(tools + os.sep)):
                tools_lines.add(shown + " (neither public nor a local header)")

    for top in ("tests", "bench"):
        for rel in walk(os.path.join(ROOT, top), (".c", ".h")):
            for _, name in includes(os.path.join(ROOT, top, rel)):
                if any(private in name for private in PRIVATE_BACKENDS):
                    info.add(f"info: {top}/{rel} includes {name} (white-box, allowed)")

    order = sorted(layer_lines, key=lambda ab: (rows[ab[0]], ab[0], rows[ab[1]], ab[1]))
    width = max([len(f"{a} -> {b}") for a, b in order] + [len("backend privacy"), len("tools -> src")])
    groups = [(f"{a} -> {b}", sorted(layer_lines[(a, b)])) for a, b in order]
    groups += [("backend privacy", sorted(privacy)), ("tools -> src", sorted(tools_lines))]
    violations = 0
    for label, lines in groups:
        for line in lines:
            print(f"{label:<{width}}   {line}")
        violations += len(lines)
        if lines:
            print()
    for line in sorted(info) + notes:
        print(line)
    used = {c for c in comp.values()}
    print(f"layers: {len(files)} files in {len(used)} components, {n_includes} include edges and "
          f"{n_calls} call edges checked, {violations} violations")
    print(" < ".join(
        (row if row in [c for c, _ in comps] else "") + "{" + ",".join(c for c, _ in comps) + "}"
        if len(comps) > 1 else comps[0][0] for row, comps in LAYERS))
    return 1 if violations else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as error:
        print(f"check_layers: {error}", file=sys.stderr)
        sys.exit(2)
    except subprocess.CalledProcessError as error:
        print(f"check_layers: {error}", file=sys.stderr)
        sys.exit(2)
