/*
 * kvrt_version.h: the library's version.
 *
 * This header is the single source of truth for the version: the build reads
 * these three macros to name the shared library and to write kvrt.pc and
 * kvrt-config-version.cmake. Bump them here only.
 *
 * Compatibility (the SONAME policy): before 1.0 every minor version is its own
 * ABI, so the SONAME is libkvrt.so.0.MINOR and patch releases keep the ABI.
 * From 1.0 on, the SONAME is libkvrt.so.MAJOR and within one major version the
 * ABI only grows (new functions, new enum values, new chained structs); no
 * struct changes, nothing is removed or renumbered. Items marked
 * "Experimental" in kvrt.h are exempt.
 */
#ifndef KVRT_VERSION_H
#define KVRT_VERSION_H

#include <stdint.h>

#define KVRT_VERSION_MAJOR 0
#define KVRT_VERSION_MINOR 2
#define KVRT_VERSION_PATCH 0

/* Packs a version the way Vulkan does: 10 bits major, 10 bits minor, 12 bits
 * patch, as a uint32_t, the type kvrt_version() returns. A C expression, not
 * a preprocessor number: in #if, compare KVRT_VERSION_MAJOR, _MINOR and
 * _PATCH. */
#define KVRT_MAKE_VERSION(major, minor, patch) \
    ((((uint32_t)(major)) << 22) | (((uint32_t)(minor)) << 12) | ((uint32_t)(patch)))

/* The version of the headers the application was compiled against, a uint32_t
 * packed by KVRT_MAKE_VERSION. Compare with kvrt_version() to detect a
 * mismatch with the library loaded at run time. */
#define KVRT_VERSION KVRT_MAKE_VERSION(KVRT_VERSION_MAJOR, KVRT_VERSION_MINOR, KVRT_VERSION_PATCH)

#endif /* KVRT_VERSION_H */
