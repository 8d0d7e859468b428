#!/usr/bin/env python3
"""Checks that every fallible public function has its call-site macro.

Why: an error names the user's file:line only when the failing call went through its header's
`#define eg_x(...) EG_CALLSITE_(eg_x(__VA_ARGS__))`; an unwrapped function reports the line of
the previous wrapped call instead, and also starts no new call (include/eagle/status.h), so a
stale error could hide its own. A new function that forgets its macro fails this test.

What it checks, for every function declared in include/eagle/*.h:
  * one returning eg_status or a pointer has a macro, unless CANNOT_FAIL lists it (with why);
  * one of any return type whose definition under src/ can raise an error (it calls eg__error,
    eg__check_arg, eg__op_error, EG_ASSERT, or a function of src/ that can; calls through
    function pointers are not followed) has a macro, unless RAISE_ONLY_ON_BROKEN_INVARIANTS
    lists it, and is not in CANNOT_FAIL;
  * every macro is the exact form above, inside its header's `#if !defined(EG_NO_CALLSITE)`
    block, and wraps a function that header declares;
  * every name in CANNOT_FAIL is still declared (a stale entry would hide a new function).
Exit status: 0 clean, 1 findings, 2 usage errors.
"""
import argparse, glob, os, re, sys

# Public functions that return eg_status or a pointer yet never record an error: readers of the
# error state itself, names and descriptions (a fixed text for NULL or an unknown value), and
# look-ups whose NULL means "not there", which the header states, not a failure.
CANNOT_FAIL = {
    # status.h: they read the error state; wrapping them would start a new call
    "eg_status_string": "fixed text per status",
    "eg_last_error": "reads the error state",
    "eg_last_status": "reads the error state",
    # names and descriptions: "" / "(null)" / "invalid" for bad input, never NULL-as-error
    "eg_variable_name": "name or \"\"",
    "eg_device_name": "name or \"(null)\"",
    "eg_device_description": "text or \"(null)\"",
    "eg_device_kind_info": "text per kind",
    "eg_device_setting_problem": "reports settings problems itself; NULL = none",
    "eg_op_name": "NULL = no such op",
    "eg_row_sparse_indices": "NULL = not a row-sparse tensor",
    "eg_row_sparse_values": "NULL = not a row-sparse tensor",
    "eg_cmudict_phoneme_name": "NULL = no such phoneme id",
    "eg_strategy_name": "name or \"(null)\"",
    "eg_distribute_info": "fixed text",
    "eg_dtype_name": "name or \"invalid\"",
    "eg_history_metric_name": "NULL = no such column",
    "eg_initializer_name": "name or \"invalid\"",
    "eg_policy_name": "name or \"invalid\"",
    "eg_layer_name": "name or \"\"",
    "eg_layer_type": "type or \"\"",
    "eg_model_name": "name or \"\"",
    "eg_activation_name": "name or \"invalid\"",
    "eg_optimizer_name": "name or \"\"",
    "eg_version": "fixed text",
    "eg_build_info": "fixed text",
    "eg_blas_info": "fixed text",
    "eg_cpu_kernels_info": "fixed text",
    "eg_cpu_low_precision_info": "fixed text",
    "eg_tensor_shape_string": "writes \"(null)\" for NULL",
    # accessors and look-ups: NULL means absent (NULL handle, no such index or slot)
    "eg_device_cpu": "always the host device",
    "eg_device_current": "always a device",
    "eg_device_at": "NULL = no device at that index",
    "eg_strategy_device": "NULL = no device at that index",
    "eg_history_values": "NULL = no such metric",
    "eg_fit_state_model": "accessor",
    "eg_fit_state_optimizer": "accessor",
    "eg_fit_state_history": "accessor",
    "eg_layer_variables": "NULL = no variables (yet)",
    "eg_model_layer": "NULL = no layer at that index",
    "eg_optimizer_get_slot": "NULL = no such slot",
    "eg_tokenizer_id_to_token": "NULL = no such id",
    "eg_tensor_shape": "accessor",
    "eg_tensor_strides": "accessor",
    "eg_tensor_device": "accessor",
    # reference counting: the argument back
    "eg_layer_state": "the custom layer's state pointer, or NULL",
    "eg_symbol_shape": "an accessor of a symbol (NULL for NULL)",
    "eg_symbol_layer": "an accessor of a symbol (NULL for NULL)",
    "eg_dataset_retain": "returns its argument",
}

# Functions that reach an error-raising path in src/ but raise nothing for anything the caller
# does: releases and frees, whose only error is EG_ERR_INTERNAL for a broken invariant (a block
# freed twice, found by the allocator), and paths guarded off (eg_graph_free ends an open graph,
# which cannot fail; eg_shutdown trims allocators it holds). Unwrapped, they start no call: an
# error pending when they run stays the one a later check reads.
RAISE_ONLY_ON_BROKEN_INVARIANTS = {
    "eg_release": "tensor release",
    "eg_element_release": "tensor releases",
    "eg_gradients_free": "tensor releases",
    "eg_tape_free": "eg_tape_end of a non-NULL tape cannot fail; tensor releases",
    "eg_function_free": "tensor releases",
    "eg_model_free": "tensor releases",
    "eg_optimizer_free": "tensor releases",
    "eg_session_free": "tensor releases",
    "eg_graph_free": "ends an open graph (cannot fail); tensor releases",
    "eg_shutdown": "trims allocators it holds",
}

MACRO = re.compile(r"^#define\s+(eg_\w+)\(\.\.\.\)\s*(?:\\\n\s*)?EG_CALLSITE_\((eg_\w+)\(__VA_ARGS__\)\)",
                   re.M)
ANY_DEFINE = re.compile(r"^#define\s+(eg_\w+)\(", re.M)
FUNCTION = re.compile(r"^([A-Za-z_][\w\s*]*?[\s*])(eg_\w+)\s*\((.*)\)$", re.S)
RAISES = re.compile(r"\b(eg__error|eg__check_arg|eg__op_error|EG_ASSERT)\s*\(")


def strip_comments_and_directives(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)


def declarations(text):
    """(return type, name) of every function a header declares (not typedefs, not fields)."""
    found = []
    for statement in re.split(r"[;{}]", strip_comments_and_directives(text)):
        statement = " ".join(statement.replace('extern "C"', " ").split())
        m = FUNCTION.match(statement)
        if m and "typedef" not in m.group(1):
            found.append((" ".join(m.group(1).split()), m.group(2)))
    return found


def callsite_blocks(text):
    """Line ranges of the `#if !defined(EG_NO_CALLSITE)` ... `#endif` blocks."""
    blocks, start = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == "#if !defined(EG_NO_CALLSITE)":
            start = number
        elif line.strip().startswith("#endif") and start is not None:
            blocks.append((start, number))
            start = None
    return blocks


def raising_functions(src_dir):
    """Public names whose definition under src/ can raise an error: it calls eg__error & co., or
    a function of src/ that can (a static one of its own file first, else a global one). Calls
    through function pointers are not followed."""
    bodies, files, statics = {}, {}, {}  # key (file or None, name): body, file; file: statics
    for path in glob.glob(os.path.join(src_dir, "**", "*.c"), recursive=True):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # a definition starts at column 0 and ends at the first "}" at column 0
        for m in re.finditer(r"^([A-Za-z_][^\n;=]*?)\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{", text,
                             re.M):
            end = text.find("\n}", m.end())
            is_static = re.match(r"\s*(static|inline)\b", m.group(1)) is not None
            key = (path if is_static else None, m.group(2))
            bodies[key] = bodies.get(key, "") + text[m.end():end if end >= 0 else len(text)]
            files[key] = path
            if is_static:
                statics.setdefault(path, set()).add(m.group(2))
    raising = {key for key, body in bodies.items() if RAISES.search(body)}
    callees = {}
    for key, body in bodies.items():
        own = statics.get(files[key], set())
        callees[key] = {(files[key], name) if name in own else (None, name)
                        for name in re.findall(r"\b([A-Za-z_]\w*)\s*\(", body)} & bodies.keys()
    changed = True
    while changed:
        changed = False
        for key, found in callees.items():
            if key not in raising and found & raising:
                raising.add(key)
                changed = True
    return {name for path, name in raising if path is None}


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=here, help="the repository (include/eagle, src)")
    args = parser.parse_args()
    headers = sorted(glob.glob(os.path.join(args.root, "include", "eagle", "*.h")))
    if not headers:
        print(f"check_callsites: no headers under {args.root}/include/eagle", file=sys.stderr)
        return 2
    raising = raising_functions(os.path.join(args.root, "src"))
    findings, declared, returns, n_macros = [], {}, {}, 0
    for path in headers:
        header = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        decls = declarations(text)
        names = {name for _, name in decls}
        for ret, name in decls:
            declared[name] = header
            returns[name] = ret
        blocks = callsite_blocks(text)
        macros = set()
        for m in ANY_DEFINE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            if m.group(1) not in names:
                continue  # a macro of another kind (a constant, a helper)
            wrapped = MACRO.match(text, m.start())
            if not wrapped or wrapped.group(1) != wrapped.group(2):
                findings.append(f"{header}:{line}: {m.group(1)}: not the call-site form "
                                f"`#define {m.group(1)}(...) EG_CALLSITE_({m.group(1)}(__VA_ARGS__))`")
                continue
            if not any(a < line < b for a, b in blocks):
                findings.append(f"{header}:{line}: {m.group(1)}: outside the "
                                f"#if !defined(EG_NO_CALLSITE) block")
            macros.add(m.group(1))
        n_macros += len(macros)
        for ret, name in decls:
            returns_status_or_pointer = ret == "eg_status" or ret.endswith("*")
            if name in macros:
                if name in CANNOT_FAIL:
                    findings.append(f"{header}: {name} has a macro but is listed in CANNOT_FAIL")
                continue
            if name in raising and name not in RAISE_ONLY_ON_BROKEN_INVARIANTS:
                findings.append(f"{header}: {name} ({ret}) raises errors in src/ but has no "
                                f"call-site macro" + (" (remove it from CANNOT_FAIL)"
                                                      if name in CANNOT_FAIL else ""))
            elif returns_status_or_pointer and name not in CANNOT_FAIL:
                findings.append(f"{header}: {name} returns {ret} but has no call-site macro "
                                f"(add one, or list it in CANNOT_FAIL with the reason)")
    for name in sorted(set(CANNOT_FAIL) - set(declared)):
        findings.append(f"CANNOT_FAIL lists {name}, which no public header declares")
    for name in sorted(RAISE_ONLY_ON_BROKEN_INVARIANTS):
        if name not in declared:
            findings.append(f"RAISE_ONLY_ON_BROKEN_INVARIANTS lists {name}, which no public "
                            f"header declares")
        elif name in CANNOT_FAIL or returns.get(name) != "void":
            findings.append(f"RAISE_ONLY_ON_BROKEN_INVARIANTS lists {name}: only void "
                            f"functions outside CANNOT_FAIL belong there")
    for line in findings:
        print(line)
    print(f"callsites: {len(declared)} public functions in {len(headers)} headers, {n_macros} "
          f"call-site macros, {len(CANNOT_FAIL)} listed as unable to fail, {len(findings)} "
          f"findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
