#!/usr/bin/env python3
"""Checks an AAR written by tools/android/package-aar.sh against the prefab
package format (schema version 2) that the Android Gradle plugin reads.

    check_aar.py FILE.aar [--abis arm64-v8a,armeabi-v7a,...] [--api N] [--stl NAME]

Checks: the archive holds AndroidManifest.xml and classes.jar;
prefab/prefab.json has schema_version 2, name "kvrt", a dotted numeric version
equal to include/kvrt/kvrt_version.h's, and a dependencies list; the module
kvrt has a module.json (export_libraries a list, library_name "libkvrt" if
given) and the seven public headers, identical to include/kvrt; each
libs/android.ABI directory has an abi.json (abi equal to the directory's ABI,
api an integer >= 24, ndk an integer, stl one of c++_static, c++_shared,
none, system, static false) and libkvrt.so, an ELF shared object of the
ABI's class and machine whose SONAME is libkvrt.so (Android loads libraries
by that name and packages only lib*.so files), which does not link the
Vulkan loader and, with stl c++_static, not libc++_shared.so either.
"""

import argparse
import json
import os
import re
import struct
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADERS = ["kvrt.h", "kvrt_static.h", "kvrt_paged.h", "kvrt_state.h", "kvrt_memory.h", "kvrt_vulkan.h", "kvrt_version.h"]
# ABI: (ELF class, e_machine)
ELF_ABI = {"arm64-v8a": (2, 183), "armeabi-v7a": (1, 40), "x86_64": (2, 62), "x86": (1, 3)}
STLS = {"c++_static", "c++_shared", "none", "system"}

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


def elf_dynamic(data):
    """(class, machine, type, soname, needed) of an ELF file's bytes."""
    if data[:4] != b"\x7fELF":
        return None
    cls, endian = data[4], data[5]
    e = "<" if endian == 1 else ">"
    if cls == 2:
        etype, machine = struct.unpack_from(e + "HH", data, 16)
        shoff, = struct.unpack_from(e + "Q", data, 40)
        shentsize, shnum = struct.unpack_from(e + "HH", data, 58)
        sh = lambda i: struct.unpack_from(e + "IIQQQQIIQQ", data, shoff + i * shentsize)
        dyn_fmt = e + "qQ"
    else:
        etype, machine = struct.unpack_from(e + "HH", data, 16)
        shoff, = struct.unpack_from(e + "I", data, 32)
        shentsize, shnum = struct.unpack_from(e + "HH", data, 46)
        sh = lambda i: struct.unpack_from(e + "IIIIIIIIII", data, shoff + i * shentsize)
        dyn_fmt = e + "iI"
    soname, needed = None, []
    for i in range(shnum):
        s = sh(i)
        if s[1] != 6:  # SHT_DYNAMIC
            continue
        off, size, link = s[4], s[5], s[6]
        stroff = sh(link)[4]
        name = lambda o: data[stroff + o:data.index(b"\0", stroff + o)].decode()
        step = struct.calcsize(dyn_fmt)
        for p in range(off, off + size, step):
            tag, val = struct.unpack_from(dyn_fmt, data, p)
            if tag == 0:
                break
            if tag == 14:
                soname = name(val)
            elif tag == 1:
                needed.append(name(val))
    return cls, machine, etype, soname, needed


def load_json(z, path):
    if not check(path in z.namelist(), "missing " + path):
        return {}
    try:
        return json.loads(z.read(path))
    except ValueError as ex:
        errors.append("%s is not JSON: %s" % (path, ex))
        return {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("aar")
    parser.add_argument("--abis", help="comma-separated ABIs that must be present (and only them)")
    parser.add_argument("--api", type=int, help="the api every abi.json must give")
    parser.add_argument("--stl", help="the stl every abi.json must give")
    args = parser.parse_args()

    z = zipfile.ZipFile(args.aar)
    names = set(z.namelist())
    check("AndroidManifest.xml" in names, "missing AndroidManifest.xml")
    check("classes.jar" in names, "missing classes.jar")

    with open(os.path.join(ROOT, "include", "kvrt", "kvrt_version.h")) as f:
        text = f.read()
    version = ".".join(re.search(r"#define KVRT_VERSION_%s (\d+)" % p, text).group(1)
                       for p in ("MAJOR", "MINOR", "PATCH"))

    pkg = load_json(z, "prefab/prefab.json")
    check(pkg.get("schema_version") == 2, "prefab.json: schema_version is not 2")
    check(pkg.get("name") == "kvrt", "prefab.json: name is not kvrt")
    check(isinstance(pkg.get("version"), str) and re.fullmatch(r"\d+(\.\d+){0,3}", pkg["version"]),
          "prefab.json: version is not dotted numbers")
    check(pkg.get("version") == version, "prefab.json: version %r, the header says %s" % (pkg.get("version"), version))
    check(isinstance(pkg.get("dependencies", []), list), "prefab.json: dependencies is not a list")

    mod = "prefab/modules/kvrt/"
    m = load_json(z, mod + "module.json")
    check(isinstance(m.get("export_libraries", []), list), "module.json: export_libraries is not a list")
    check(m.get("library_name", "libkvrt") == "libkvrt", "module.json: library_name is not libkvrt")
    for h in HEADERS:
        path = mod + "include/kvrt/" + h
        if check(path in names, "missing " + path):
            with open(os.path.join(ROOT, "include", "kvrt", h), "rb") as f:
                check(z.read(path) == f.read(), path + " differs from include/kvrt/" + h)

    abis = sorted({n[len(mod + "libs/android."):].split("/")[0] for n in names if n.startswith(mod + "libs/android.")})
    check(abis, "no libs/android.<abi> directories")
    if args.abis:
        check(abis == sorted(args.abis.split(",")), "ABIs %s, expected %s" % (abis, args.abis))
    for abi in abis:
        d = mod + "libs/android." + abi + "/"
        check(abi in ELF_ABI, "unknown ABI directory " + d)
        a = load_json(z, d + "abi.json")
        check(a.get("abi") == abi, d + "abi.json: abi is %r" % a.get("abi"))
        check(isinstance(a.get("api"), int) and a["api"] >= 24, d + "abi.json: api is not an integer >= 24")
        check(isinstance(a.get("ndk"), int) and a["ndk"] > 0, d + "abi.json: ndk is not a positive integer")
        check(a.get("stl") in STLS, d + "abi.json: stl %r is not one of %s" % (a.get("stl"), sorted(STLS)))
        check(a.get("static") is False, d + "abi.json: static is not false")
        if args.api is not None:
            check(a.get("api") == args.api, d + "abi.json: api %r, expected %d" % (a.get("api"), args.api))
        if args.stl is not None:
            check(a.get("stl") == args.stl, d + "abi.json: stl %r, expected %s" % (a.get("stl"), args.stl))
        if not check(d + "libkvrt.so" in names, "missing " + d + "libkvrt.so") or abi not in ELF_ABI:
            continue
        elf = elf_dynamic(z.read(d + "libkvrt.so"))
        if not check(elf is not None, d + "libkvrt.so is not ELF"):
            continue
        cls, machine, etype, soname, needed = elf
        check((cls, machine) == ELF_ABI[abi], d + "libkvrt.so: ELF class %d machine %d, not %s's" % (cls, machine, abi))
        check(etype == 3, d + "libkvrt.so is not a shared object")
        check(soname == "libkvrt.so", d + "libkvrt.so: SONAME %r, Android needs libkvrt.so" % soname)
        check(not any(n.startswith("libvulkan") for n in needed), d + "libkvrt.so links the Vulkan loader")
        if a.get("stl") == "c++_static":
            check("libc++_shared.so" not in needed, d + "libkvrt.so needs libc++_shared.so but stl is c++_static")
        print("check_aar: %-12s %s, SONAME %s, needs %s" % (abi, a.get("stl"), soname, ", ".join(needed) or "nothing"))

    for e in errors:
        print("check_aar: FAIL: " + e, file=sys.stderr)
    if not errors:
        print("check_aar: %s: prefab package kvrt %s, ABIs %s: ok" % (os.path.basename(args.aar), version, ", ".join(abis)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
