# cli_test.sh: what the shell tests of the sluice tool share. Sourced, not
# run (ctest runs tests/test_*.sh): `. "$(dirname "$0")/cli_test.sh" NAME`.
# Then:
#  - SLUICE_BIN has been checked to name the built sluice (ctest sets it);
#  - fail MESSAGE... prints "FAIL: MESSAGE" and counts it in $failures;
#  - $tmp is a fresh directory, removed at exit (a test that sets its own
#    EXIT trap removes it there);
#  - cli_test_end [DETAIL] exits 1 after any failure, else prints
#    "NAME: ok" (and " (DETAIL)").

cli_test_name=$1

if [[ -z "${SLUICE_BIN:-}" || ! -x "${SLUICE_BIN}" ]]; then
    echo "$cli_test_name: SLUICE_BIN must name the built sluice binary (got '${SLUICE_BIN:-}')" >&2
    exit 1
fi

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-${cli_test_name#test_}.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

cli_test_end() {
    if [[ $failures -ne 0 ]]; then
        echo "$cli_test_name: $failures failure(s)" >&2
        exit 1
    fi
    echo "$cli_test_name: ok${1:+ ($1)}"
}
