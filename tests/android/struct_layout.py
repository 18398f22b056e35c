#!/usr/bin/env python3
"""Public struct layouts on the four Android ABIs.

Compiles the public headers with clang for aarch64, armv7a, x86_64 and i686
Android (clang's freestanding headers, no NDK), reads every public struct's
layout from clang's record-layout dump and checks:

  1. All four ABIs lay every struct out naturally: each field at the next
     multiple of its own size, for that target's pointer size. So the two
     64-bit ABIs agree with each other, the two 32-bit ABIs agree with each
     other, and a binding generated on one ABI of a pointer size is right
     on the other. i686 on its own aligns 64-bit integers and doubles inside
     structs to 4 bytes (the ARM ABIs to 8); the header's KVRT_ALIGN8 on
     every 64-bit member makes it align them to 8 as well, and this check
     fails for a 64-bit member that lacks it.
  2. The layouts equal the committed baseline, struct_layout_expected.h
     (sizes and offsets for LP64 and for ILP32), so no struct changes size
     or moves a field on any ABI unnoticed.
  3. struct_layout.c, which _Static_asserts that baseline with sizeof and
     offsetof, compiles for each of the four targets.

    struct_layout.py            check (exit status 1 on any failure)
    struct_layout.py --write    rewrite struct_layout_expected.h
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INCLUDE = os.path.join(ROOT, "include")
EXPECTED = os.path.join(HERE, "struct_layout_expected.h")
ASSERTS = os.path.join(HERE, "struct_layout.c")

# (clang target, Android ABI name, pointer size)
TARGETS = [
    ("aarch64-linux-android24", "arm64-v8a", 8),
    ("x86_64-linux-android24", "x86_64", 8),
    ("armv7a-linux-androideabi24", "armeabi-v7a", 4),
    ("i686-linux-android24", "x86", 4),
]

# Field types whose size does not follow from their spelling. Pointers
# (anything with a '*') are the pointer size.
POINTER_TYPES = {"VkInstance", "VkPhysicalDevice", "VkDevice", "VkQueue",
                 "VkCommandBuffer", "kvrt_log_fn"}
FOUR_BYTE = {"uint32_t", "int32_t", "float", "kvrt_flags", "VkFlags", "VkBool32"}
EIGHT_BYTE = {"uint64_t", "int64_t", "double", "VkDeviceSize"}
# Non-dispatchable Vulkan handles: a pointer on 64-bit, uint64_t on 32-bit.
NON_DISPATCHABLE = {"VkFence", "VkSemaphore", "VkBuffer", "VkDeviceMemory",
                    "VkPipelineCache", "VkEvent", "VkQueryPool", "VkCommandPool"}


def find_clang():
    for name in ["clang"] + ["clang-%d" % v for v in range(20, 12, -1)]:
        path = shutil.which(name)
        if path:
            return path
    return None


def struct_names():
    names = []
    for header in sorted(os.listdir(os.path.join(INCLUDE, "kvrt"))):
        with open(os.path.join(INCLUDE, "kvrt", header)) as f:
            names += re.findall(r"typedef struct (kvrt_\w+) \{", f.read())
    return names


def vulkan_include_dir(tmp):
    """A directory holding only the Vulkan headers (vulkan/, vk_video/), so
    that the system's libc headers stay out of a freestanding compile."""
    for base in [os.environ.get("VULKAN_INCLUDE_DIR"), "/usr/include", "/usr/local/include"]:
        if base and os.path.isfile(os.path.join(base, "vulkan", "vulkan.h")):
            d = os.path.join(tmp, "vkinc")
            os.makedirs(d, exist_ok=True)
            for sub in ("vulkan", "vk_video"):
                if os.path.isdir(os.path.join(base, sub)):
                    os.symlink(os.path.join(base, sub), os.path.join(d, sub))
            return d
    sys.exit("struct_layout: no Vulkan headers found (set VULKAN_INCLUDE_DIR)")


def clang_args(clang, target, vkinc):
    return [clang, "--target=" + target, "-ffreestanding", "-nostdlibinc", "-std=c11",
            "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only",
            # The experimental structs' layouts are checked too.
            "-DKVRT_EXPERIMENTAL", "-I" + INCLUDE, "-I" + vkinc]


def dump_layouts(clang, target, vkinc, names, tmp):
    probe = os.path.join(tmp, "probe.c")
    with open(probe, "w") as f:
        for header in sorted(os.listdir(os.path.join(INCLUDE, "kvrt"))):
            f.write("#include <kvrt/%s>\n" % header)
        for n in names:
            f.write("extern char probe_%s[sizeof(struct %s)];\n" % (n, n))
    out = subprocess.run(clang_args(clang, target, vkinc) + ["-Xclang", "-fdump-record-layouts", probe],
                         check=True, capture_output=True, text=True).stdout
    layouts = {}
    for block in out.split("*** Dumping AST Record Layout")[1:]:
        lines = block.strip("\n").splitlines()
        m = re.match(r"\s*0 \| struct (\w+)$", lines[0])
        if not m or m.group(1) not in names:
            continue
        fields = []
        for line in lines[1:]:
            fm = re.match(r"\s*(\d+) \|   (\S.*?) (\w+)$", line)  # depth 1 only
            if fm:
                fields.append((fm.group(3), fm.group(2), int(fm.group(1))))
            sm = re.search(r"\[sizeof=(\d+), align=(\d+)", line)
            if sm:
                size, align = int(sm.group(1)), int(sm.group(2))
        layouts[m.group(1)] = {"fields": fields, "size": size, "align": align}
    missing = [n for n in names if n not in layouts]
    if missing:
        sys.exit("struct_layout: no layout dumped for %s on %s" % (", ".join(missing), target))
    return layouts


def field_size(ftype, psize):
    """(size, alignment) of a field under natural alignment."""
    arr = re.match(r"(.*)\[(\d+)\]$", ftype)
    if arr:
        s, a = field_size(arr.group(1), psize)
        return s * int(arr.group(2)), a
    if "*" in ftype or ftype in POINTER_TYPES or ftype.startswith("PFN_") or \
            re.match(r"kvrt_\w+$", ftype) and ftype in HANDLE_TYPES:
        return psize, psize
    if ftype in NON_DISPATCHABLE or ftype in EIGHT_BYTE:
        return 8, 8
    if ftype in FOUR_BYTE or ftype in ENUM_TYPES:
        return 4, 4
    if ftype in ("char", "uint8_t", "int8_t"):
        return 1, 1
    sys.exit("struct_layout: unknown field type '%s': add it to struct_layout.py" % ftype)


def header_text():
    text = ""
    for header in sorted(os.listdir(os.path.join(INCLUDE, "kvrt"))):
        with open(os.path.join(INCLUDE, "kvrt", header)) as f:
            text += f.read()
    return text


HANDLE_TYPES = set()
ENUM_TYPES = set()


def natural_layout(layout, psize):
    off, fields, max_align = 0, [], 1
    for name, ftype, _ in layout["fields"]:
        size, align = field_size(ftype, psize)
        off = (off + align - 1) // align * align
        fields.append((name, ftype, off, size))
        off += size
        max_align = max(max_align, align)
    return fields, (off + max_align - 1) // max_align * max_align


def padding(layout, psize):
    """Implicit padding bytes of the natural layout: holes and tail."""
    fields, size = natural_layout(layout, psize)
    holes, end = [], 0
    for name, _, off, fsize in fields:
        if off != end:
            holes.append("%d bytes before %s" % (off - end, name))
        end = off + fsize
    if size != end:
        holes.append("%d bytes at the end" % (size - end))
    return holes


def render_expected(names, by_abi):
    lines = [
        "/* Public struct layouts on Android's ABIs, written by struct_layout.py",
        " * --write and checked by struct_layout.c and struct_layout.py.",
        " *",
        " * KVRT_LAYOUT_SIZE(struct, LP64, ILP32) and",
        " * KVRT_LAYOUT_FIELD(struct, field, LP64, ILP32): sizes and offsets for",
        " * arm64-v8a and x86_64 (LP64) and for armeabi-v7a and x86 (ILP32; x86",
        " * through the header's KVRT_ALIGN8). */",
        "",
    ]
    for n in names:
        l64, l32 = by_abi["arm64-v8a"][n], by_abi["armeabi-v7a"][n]
        lines.append("KVRT_LAYOUT_SIZE(%s, %d, %d)" % (n, l64["size"], l32["size"]))
        for (fname, _, o64), (_, _, o32) in zip(l64["fields"], l32["fields"]):
            lines.append("KVRT_LAYOUT_FIELD(%s, %s, %d, %d)" % (n, fname, o64, o32))
        lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite struct_layout_expected.h")
    parser.add_argument("--include", help="check the headers in this directory instead of include/")
    args = parser.parse_args()
    if args.include:
        global INCLUDE
        INCLUDE = os.path.abspath(args.include)

    clang = find_clang()
    if not clang:
        sys.exit("struct_layout: clang not found (on Debian: apt-get install clang)")
    text = header_text()
    HANDLE_TYPES.update(re.findall(r"typedef struct kvrt_\w+_T\* (kvrt_\w+);", text))
    ENUM_TYPES.update(re.findall(r"\}\s*(kvrt_\w+);", text))
    ENUM_TYPES.difference_update(re.findall(r"typedef struct (kvrt_\w+) \{", text))

    names = struct_names()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        vkinc = vulkan_include_dir(tmp)
        by_abi = {abi: dump_layouts(clang, target, vkinc, names, tmp) for target, abi, _ in TARGETS}

        # 1. Natural layout on every ABI.
        for target, abi, psize in TARGETS:
            for n in names:
                layout = by_abi[abi][n]
                fields, size = natural_layout(layout, psize)
                got = [(f, o) for f, _, o in layout["fields"]]
                want = [(f, o) for f, _, o, _ in fields]
                if got != want or layout["size"] != size:
                    failures.append("%s on %s: layout %s size %d, natural %s size %d" %
                                    (n, abi, got, layout["size"], want, size))

        # 2. The baseline.
        rendered = render_expected(names, by_abi)
        if args.write:
            with open(EXPECTED, "w") as f:
                f.write(rendered)
            print("struct_layout: wrote %s" % os.path.relpath(EXPECTED, ROOT))
        else:
            with open(EXPECTED) as f:
                if f.read() != rendered:
                    failures.append("layouts differ from %s: a struct changed or is new; if intended, "
                                    "run tests/android/struct_layout.py --write and review the diff"
                                    % os.path.relpath(EXPECTED, ROOT))

        # 3. The _Static_assert test on each target.
        for target, abi, _ in TARGETS:
            r = subprocess.run(clang_args(clang, target, vkinc) + ["-I" + HERE, ASSERTS],
                               capture_output=True, text=True)
            status = "ok" if r.returncode == 0 else "FAILED"
            print("struct_layout: %-28s %-12s static asserts %s" % (target, abi, status))
            if r.returncode != 0:
                failures.append("struct_layout.c on %s:\n%s" % (target, r.stderr))

    # The two ABIs of each pointer size, field by field (implied by 1, and
    # said here in the terms that matter to a binding).
    for a, b in (("arm64-v8a", "x86_64"), ("armeabi-v7a", "x86")):
        for n in names:
            la, lb = by_abi[a][n], by_abi[b][n]
            if la["size"] != lb["size"] or [(f, o) for f, _, o in la["fields"]] != \
                    [(f, o) for f, _, o in lb["fields"]]:
                failures.append("%s differs between %s and %s" % (n, a, b))
    print("struct_layout: %d public structs, one layout per pointer size on all four ABIs%s"
          % (len(names), "" if not failures else " (NOT: see below)"))
    # Where ILP32 has implicit padding (LP64's 4 bytes after `type` are the
    # same on both 64-bit ABIs and harmless), for whoever grows a struct.
    for n in names:
        holes = padding(by_abi["arm64-v8a"][n], 4)
        if holes:
            print("  ILP32 implicit padding in %s: %s" % (n, "; ".join(holes)))

    for f in failures:
        print("struct_layout: FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
