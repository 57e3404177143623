#!/bin/sh
# cli-demo.sh: one limit shared by separate processes, as scripts use it.
# Three invocations of `sluice check` on one key, each its own process, share
# the limit "2 per minute" through a shared-memory store file: the first two
# are allowed, the third is denied and says how long to wait.
#
#   sh docs/cli-demo.sh [SLUICE]     (SLUICE: the sluice binary; default: sluice)
#
# Run by `make run` with the built binary. Exits 0 when the third is denied.
set -u
sluice=${1:-sluice}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demo.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

policy='fixed-window limit=2 window=1m'

# demo STORE_FILE: the three invocations; 0 when the limit held, 1 when the
# invocations straddled the end of a window (a new minute brings 2 more), 2
# on an error.
demo() {
    for i in 1 2 3; do
        echo "\$ sluice check deploy --policy '$policy' --store shm:\$TMP/demo.shm"
        "$sluice" check deploy --policy "$policy" --store "shm:$1"
        status=$?
        echo "# exit status $status"
        case $i:$status in
        [12]:0 | 3:1) ;;
        [23]:[01]) return 1 ;;
        *) return 2 ;;
        esac
    done
}

echo "# three processes, one limit ($policy), in a fresh store file"
demo "$tmp/demo.shm"
status=$?
if [ $status -eq 1 ]; then
    # The windows are minutes of the system's monotonic clock: rarely, one
    # ends between two invocations. The next ends a minute later.
    echo "# a new minute began during the demo (2 more allowed): once more, in a fresh file"
    demo "$tmp/demo2.shm"
    status=$?
fi
if [ $status -ne 0 ]; then
    echo "cli-demo: the invocations did not go as the limit says" >&2
    exit 1
fi
