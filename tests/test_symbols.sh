#!/usr/bin/env bash
# test_symbols.sh: the shared library exports the public API and nothing else.
# Every exported symbol starts with sluice_ (never the internal sluice__), and
# there are enough of them that the check cannot pass on an empty library;
# it is marked never to be unloaded; and it links nothing but libc and
# pthreads (its NEEDED entries). The loop adapters, when built
# ($SLUICE_UV_LIB, $SLUICE_EVENT_LIB), export their own functions only and
# link the core and their loop library, no other.
# The library: $SLUICE_SHARED_LIB (set by ctest), or the first argument, or
# libsluice.so in $SLUICE_BUILD_DIR.
set -uo pipefail

lib=${1:-${SLUICE_SHARED_LIB:-}}
if [ -z "$lib" ] && [ -n "${SLUICE_BUILD_DIR:-}" ]; then
    lib=$SLUICE_BUILD_DIR/libsluice.so
fi
if [ -z "$lib" ] || [ ! -f "$lib" ]; then
    echo "FAIL: no shared library to check (got '${lib}')" >&2
    exit 1
fi
if ! command -v nm >/dev/null; then
    echo "FAIL: nm not found (make deps installs binutils)" >&2
    exit 1
fi

min_exports=20
if ! syms=$(nm -D --defined-only "$lib"); then
    echo "FAIL: nm -D --defined-only $lib" >&2
    exit 1
fi

# "ADDRESS TYPE NAME[@VERSION]". Absolute symbols (A) are the linker's own.
exported=$(printf '%s\n' "$syms" | awk 'NF >= 3 && $2 != "A" { sub(/@.*/, "", $3); print $2, $3 }')
# Linker-made entry points, and what a sanitizer build may add.
allowed='^(_init|_fini|_edata|_end|__bss_start|__(asan|ubsan|tsan|sanitizer|lsan)_.*)$'

failures=0
bad=$(printf '%s\n' "$exported" | awk -v re="$allowed" '$2 !~ /^sluice_/ && $2 !~ re')
if [ -n "$bad" ]; then
    echo "FAIL: exported symbols without the sluice_ prefix (type name):" >&2
    printf '  %s\n' "$bad" >&2
    failures=$((failures + 1))
fi
# the internal functions libsluice-redis.so calls (SLUICE__SHARED in
# src/internal.h) are the only sluice__ symbols exported
shared='^(sluice__errf|sluice__store_errf|sluice__policy_set_add|sluice__policy_set_free|sluice__url_int|sluice__url_choice|sluice__url_is|sluice__siphash24|sluice__deny_(new|free|put|put_since|get|drop|answered|parts_of))$'
internal=$(printf '%s\n' "$exported" | awk -v ok="$shared" '$2 ~ /^sluice__/ && $2 !~ ok')
if [ -n "$internal" ]; then
    echo "FAIL: internal sluice__ symbols are exported (mark them static or keep them out of SLUICE_EXTERN):" >&2
    printf '  %s\n' "$internal" >&2
    failures=$((failures + 1))
fi
functions=$(printf '%s\n' "$exported" | awk '$1 ~ /^[TtWi]$/ && $2 ~ /^sluice_/ && $2 !~ /^sluice__/' | wc -l)
if [ "$functions" -lt "$min_exports" ]; then
    echo "FAIL: only $functions sluice_ functions exported by $lib (expected at least $min_exports)" >&2
    failures=$((failures + 1))
fi
# Never unloaded (dlclose): a thread-exit destructor of the memory store's
# must stay mapped until the last thread that used it ends.
if command -v readelf >/dev/null && ! readelf -d "$lib" | grep -q 'Flags:.*NODELETE'; then
    echo "FAIL: $lib is not marked NODELETE (link it with -z nodelete)" >&2
    failures=$((failures + 1))
fi

# What a library names in NEEDED, one a line.
needed() {
    readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
}
# libc's own pieces (pthreads and dl are libc's since glibc 2.34), the
# loader, and a sanitizer's runtime
system='^(libc|libpthread|libdl|librt|ld-linux[-a-z0-9_]*|ld64|libasan|libubsan|libtsan|libstdc\+\+|libm|libgcc_s)\.so'
if ! command -v readelf >/dev/null; then
    echo "FAIL: readelf not found (make deps installs binutils)" >&2
    failures=$((failures + 1))
else
    others=$(needed "$lib" | grep -Ev "$system")
    if [ -n "$others" ]; then
        echo "FAIL: $(basename "$lib") links more than libc and pthreads: $(echo $others)" >&2
        failures=$((failures + 1))
    fi
fi

# check_adapter LIB PREFIX LOOPLIB: exports PREFIX* only; NEEDED is
# libsluice.so.0, LOOPLIB and the system's, nothing else (no hiredis, not
# the other loop library)
adapters=""
check_adapter() {
    local alib=$1 prefix=$2 looplib=$3 exports bad_exports libs stray
    [ -n "$alib" ] || return 0
    if [ ! -f "$alib" ]; then
        echo "FAIL: no adapter library at $alib" >&2
        failures=$((failures + 1))
        return
    fi
    exports=$(nm -D --defined-only "$alib" | awk 'NF >= 3 && $2 != "A" { sub(/@.*/, "", $3); print $3 }' |
        grep -Ev "$allowed")
    bad_exports=$(grep -v "^$prefix" <<<"$exports")
    if [ -n "$bad_exports" ]; then
        echo "FAIL: $(basename "$alib") exports more than $prefix*: $(echo $bad_exports)" >&2
        failures=$((failures + 1))
    fi
    if [ "$(grep -c "^$prefix" <<<"$exports")" -lt 2 ]; then
        echo "FAIL: $(basename "$alib") exports no ${prefix}attach and ${prefix}detach" >&2
        failures=$((failures + 1))
    fi
    libs=$(needed "$alib")
    if ! grep -qx libsluice.so.0 <<<"$libs" || ! grep -q "^$looplib" <<<"$libs"; then
        echo "FAIL: $(basename "$alib") does not link libsluice.so.0 and $looplib: $(echo $libs)" >&2
        failures=$((failures + 1))
    fi
    stray=$(grep -Ev "$system" <<<"$libs" | grep -Ev "^(libsluice\.so\.0|$looplib)")
    if [ -n "$stray" ]; then
        echo "FAIL: $(basename "$alib") links $(echo $stray) too" >&2
        failures=$((failures + 1))
    fi
    adapters="$adapters, $(basename "$alib") ($(echo $exports | tr ' ' ','))"
}
check_adapter "${SLUICE_UV_LIB:-}" sluice_uv_ 'libuv\.so'
check_adapter "${SLUICE_EVENT_LIB:-}" sluice_event_ 'libevent_core'

if [ "$failures" -ne 0 ]; then
    exit 1
fi
echo "test_symbols: ok: $functions sluice_ functions exported by $(basename "$lib"), nothing else; it links" \
     "$(needed "$lib" | tr '\n' ' ')only$adapters"
