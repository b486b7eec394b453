# shellcheck shell=bash
# Guest-side helpers for the cxlctl VM tests (sourced by the harness runner,
# bash).  Why plain shell: bookworm's ndctl 76 cannot create RAM regions
# ("region type 'ram' not supported yet"), so tests program the kernel's
# region ABI through sysfs themselves, exactly like `cxl create-region` does
# (see /work/shared/docs/qemu-cxl.md and ndctl_sysfs.md §1.2).  Temporary:
# cxlctl will get its own region command later.
#
# Functions:
#   cxlvm_prelude                    load drivers, wait for $CXLVM_MEMDEVS memdevs
#   memdev_by_serial SERIAL          print the memN whose serial equals SERIAL
#   create_ram_region ROOTDEC GRAN MEMDEV...   create+commit+bind; print regionN
#   destroy_region REGION            offline, unbind, delete (best effort, loud)

CXL_DEV=/sys/bus/cxl/devices

cxlvm_log() { echo "cxlvm: $*" >&2; }

# Load the CXL/DAX drivers and wait (up to $CXLVM_SETTLE_TIMEOUT s) until the
# expected number of memdevs, each with its endpoint port, exists.  Endpoints
# matter: a memdev without one cannot join a region yet.
cxlvm_prelude() {
    local m want=${CXLVM_MEMDEVS:-0} limit=${CXLVM_SETTLE_TIMEOUT:-60} n e i=0
    for m in cxl_acpi cxl_pci cxl_mem dax_cxl device_dax kmem; do
        modprobe "$m" || cxlvm_log "modprobe $m failed"
    done
    udevadm settle --timeout="$limit" 2>/dev/null || true
    while :; do
        n=$(ls -d "$CXL_DEV"/mem* 2>/dev/null | wc -l)
        e=$(ls -d "$CXL_DEV"/endpoint* 2>/dev/null | wc -l)
        if [ "$n" -ge "$want" ] && [ "$e" -ge "$want" ]; then break; fi
        if [ "$i" -ge "$((limit * 5))" ]; then
            cxlvm_log "timeout: $n memdevs, $e endpoints after ${limit}s, want $want"
            ls "$CXL_DEV" >&2
            return 1
        fi
        i=$((i + 1))
        sleep 0.2
    done
    udevadm settle --timeout="$limit" 2>/dev/null || true
    cxlvm_log "prelude ok: $n memdevs, $e endpoints ($(uname -r))"
}
