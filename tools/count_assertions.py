#!/usr/bin/env python3
"""Counts the assertions written in the C++ tests (tests/**/*.cpp, *.hpp).

An assertion is a use of a Catch2 assertion macro (REQUIRE, CHECK and their
_FALSE, _THAT, _NOTHROW, _THROWS... forms, FAIL) or of a test macro built on
them (KVRT_REQUIRE_OK, CHECK_FAILS, CHECK_REJECTED, MODEL_REQUIRE), counted
where it is written: inside helper functions and macro bodies too, but not the
`#define NAME(` line itself, comments or string literals. Rows of the
bad-input table (err(...) and noop(...) row builders in test_*bad_input*.cpp)
are counted separately.

Usage: tools/count_assertions.py [tests-dir]   (prints totals and per file with -v)
"""
import pathlib
import re
import sys

MACROS = re.compile(
    r"\b(REQUIRE|CHECK|REQUIRE_FALSE|CHECK_FALSE|REQUIRE_THAT|CHECK_THAT|REQUIRE_NOTHROW|CHECK_NOTHROW|"
    r"REQUIRE_THROWS\w*|CHECK_THROWS\w*|FAIL|FAIL_CHECK|KVRT_REQUIRE_OK|CHECK_FAILS|CHECK_REJECTED|"
    r"MODEL_REQUIRE)\s*\(")
ROWS = re.compile(r"\b(err|noop)\s*\(")
# Calls of test helpers that assert inside (CacheSpec::create REQUIREs the
# creation to succeed), counted apart: each stands for the REQUIRE a test
# used to write around kvrt_cache_create.
ASSERTING_CALLS = re.compile(r"\.create\(\s*\w+\s*\)")
DEFINE = re.compile(r"^\s*#\s*define\s+\w+")


def strip(text):
    """The text without comments and string/char literals (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "tests")
    verbose = "-v" in sys.argv
    total = rows = calls = 0
    for path in sorted(list(root.rglob("*.cpp")) + list(root.rglob("*.hpp"))):
        code = strip(path.read_text(errors="replace"))
        n = 0
        for line in code.splitlines():
            m = DEFINE.match(line)
            # A macro's own name on its #define line is no use of it.
            n += len(MACROS.findall(line[m.end():] if m else line))
        r = len(ROWS.findall(code)) if "bad_input" in path.name and path.suffix == ".cpp" else 0
        c = len(ASSERTING_CALLS.findall(code))
        total += n
        rows += r
        calls += c
        if verbose and (n or r or c):
            print(f"{n:6d} {r:5d} {c:5d}  {path}")
    print(f"assertions: {total}")
    print(f"bad-input table rows (err/noop builders as written): {rows}")
    print(f"calls of asserting helpers (CacheSpec::create): {calls}")


if __name__ == "__main__":
    main()
