# shellcheck shell=bash
# Guest-side helpers for the cxlctl VM tests (sourced by the harness runner,
# bash).  Why plain shell: bookworm's ndctl 76 cannot create RAM regions
# ("region type 'ram' not supported yet"), so tests program the kernel's
# region ABI through sysfs themselves, exactly like `cxl create-region` does
# (the kernel's Documentation/ABI/testing/sysfs-bus-cxl; docs/testing.md).  Temporary:
# cxlctl will get its own region command later.
#
# Functions:
#   cxlvm_prelude                    load drivers, wait for $CXLVM_MEMDEVS memdevs
#   memdev_by_serial SERIAL          print the memN whose serial equals SERIAL
#   create_ram_region ROOTDEC GRAN MEMDEV...   create+commit+bind; print regionN
#   destroy_region REGION            offline, unbind, delete (best effort, loud)
#   cxlvm_peers DIR                  the peer tools' output every recorded fixture carries
#   cxlvm_wait_ready FILE PID [S]    wait for a launched program's ready file

CXL_DEV=/sys/bus/cxl/devices

cxlvm_log() { echo "cxlvm: $*" >&2; }

# Load the CXL/DAX drivers and wait (up to $CXLVM_SETTLE_TIMEOUT s) until the
# expected number of memdevs, each with its endpoint port, exists.  Endpoints
# matter: a memdev without one cannot join a region yet.
cxlvm_prelude() {
    local m want=${CXLVM_MEMDEVS:-0} limit=${CXLVM_SETTLE_TIMEOUT:-60} n e i=0 d
    # the guest sees the host's root: the host's cxlctl state and configuration (a probe record a
    # `cxlctl probe` left in /var/lib/cxlctl, a cxlctl.toml) are not the guest's; each check starts empty
    for d in /var/lib/cxlctl /etc/cxlctl; do
        if [ -d "$d" ]; then mount -t tmpfs -o mode=0755 cxlvm-empty "$d" || cxlvm_log "cannot hide the host's $d"; fi
    done
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

# Write VALUE to FILE, saying which write failed and why (bare `echo >` errors
# like "write error: Invalid argument" do not name the attribute).
_cxl_write() {
    local value=$1 file=$2 err
    if ! err=$( { printf '%s\n' "$value" > "$file"; } 2>&1 ); then
        cxlvm_log "write '$value' > $file failed: ${err##*: }"
        return 1
    fi
}

# The memdev whose serial equals SERIAL (any base bash understands: 0x1001).
memdev_by_serial() {
    local want=$(($1)) m
    for m in "$CXL_DEV"/mem*; do
        [ -e "$m/serial" ] || continue
        if [ "$(($(cat "$m/serial")))" = "$want" ]; then
            basename "$m"
            return 0
        fi
    done
    cxlvm_log "no memdev has serial $1"
    return 1
}

# endpointN of memdev M: the endpoint port whose uport is M (no direct link
# exists; this is how libcxl finds it too).
_cxl_endpoint_of() {
    local e
    for e in "$CXL_DEV"/endpoint*; do
        if [ "$(basename "$(readlink -f "$e/uport")")" = "$1" ]; then
            basename "$e"
            return 0
        fi
    done
    cxlvm_log "memdev $1 has no endpoint port (is it bound to cxl_mem?)"
    return 1
}

# Parent port name of a port/endpoint: the directory it lives in.
_cxl_parent() { basename "$(dirname "$(readlink -f "$CXL_DEV/$1")")"; }

# Id Y of PARENT/dportY leading to CHILD.  Works without the v6.3
# `parent_dport` link (6.1 lacks it): the child's uport is the dport itself
# (host bridge below the root, ACPI or PCI name alike) or a device below it.
_cxl_dport_to() {
    local parent=$1 child=$2 u d r
    u=$(readlink -f "$CXL_DEV/$child/uport")
    for d in "$CXL_DEV/$parent"/dport*; do
        r=$(readlink -f "$d")
        case "$u" in
        "$r" | "$r"/*)
            echo "${d##*/dport}"
            return 0
            ;;
        esac
    done
    cxlvm_log "no dport of $parent leads to $child ($u)"
    return 1
}

# "port:dport" pairs from the endpoint's parent up to the root, one per line.
_cxl_chain() {
    local c=$1 p d
    while :; do
        case "$c" in root*) return 0 ;; esac
        p=$(_cxl_parent "$c") || return 1
        d=$(_cxl_dport_to "$p" "$c") || return 1
        echo "$p:$d"
        c=$p
    done
}

# Interleave position of each memdev, as the kernel computes it for
# auto-discovered regions (region.c calc_interleave_pos): walking up from the
# endpoint, pos = pos * ways(level) + index(level), so the root level is the
# least significant digit.  At the root, index is the host bridge's place in
# the root decoder's target_list (fixed by firmware; a wrong order fails with
# ENXIO/EIO); below it the decoders are programmed by the kernel in target
# order, so dports are ranked by id among those the region uses and ways is
# how many distinct ones it uses.  Prints "pos memdev" lines.
_cxl_positions() {
    local rd=$1; shift
    local -A chains used
    local m e line port dport pos ways idx rways tl i d
    rways=$(cat "$CXL_DEV/$rd/interleave_ways")
    IFS=, read -r -a tl < "$CXL_DEV/$rd/target_list"
    for m in "$@"; do
        e=$(_cxl_endpoint_of "$m") || return 1
        chains[$m]=$(_cxl_chain "$e") || return 1
        while IFS=: read -r port dport; do
            case "$port" in root*) continue ;; esac
            case " ${used[$port]} " in *" $dport "*) ;; *) used[$port]="${used[$port]} $dport" ;; esac
        done <<< "${chains[$m]}"
    done
    for m in "$@"; do
        pos=0
        while IFS=: read -r port dport; do
            case "$port" in
            root*)
                idx=-1
                for i in "${!tl[@]}"; do [ "${tl[$i]}" = "$dport" ] && idx=$i; done
                if [ "$idx" -lt 0 ]; then
                    cxlvm_log "$m: host bridge dport $dport is not a target of $rd (target_list ${tl[*]})"
                    return 1
                fi
                ways=$rways
                ;;
            *)
                idx=0; ways=0
                for d in $(printf '%s\n' ${used[$port]} | sort -n); do
                    [ "$d" -lt "$dport" ] && idx=$((idx + 1))
                    ways=$((ways + 1))
                done
                ;;
            esac
            pos=$((pos * ways + idx))
        done <<< "${chains[$m]}"
        echo "$pos $m"
    done | sort -n
}

# First endpoint decoder of memdev M that is free (no HPA size, no DPA).
_cxl_free_decoder() {
    local e d
    e=$(_cxl_endpoint_of "$1") || return 1
    e=${e#endpoint}
    for d in $(ls -d "$CXL_DEV"/decoder"$e".* 2>/dev/null | sort -t. -k2 -n); do
        if [ "$(($(cat "$d/size")))" = 0 ] && [ "$(($(cat "$d/dpa_size")))" = 0 ]; then
            basename "$d"
            return 0
        fi
    done
    cxlvm_log "memdev $1 (endpoint$e) has no free endpoint decoder"
    return 1
}

# create_ram_region ROOTDECODER GRANULARITY MEMDEV...
# Creates, sizes, targets (in interleave position order, whatever order the
# memdevs are given in), commits and binds a RAM region the way the doc's
# sysfs sequence does; prints the region name.  Size: the smallest memdev's
# RAM rounded down to 256 MiB, times ways ($CXLVM_REGION_SIZE overrides the
# total).  Waits for the dax device the kernel then creates and onlines.  On
# failure, undoes what it did and returns 1.
create_ram_region() {
    local rd=$1 gran=$2; shift 2
    local ways=$# m r per sz min="" ordered=() decs=() i d pos
    if [ ! -e "$CXL_DEV/$rd/create_ram_region" ]; then
        cxlvm_log "$rd has no create_ram_region: kernel $(uname -r) cannot create RAM regions through sysfs (needs v6.3+)"
        return 1
    fi
    for m in "$@"; do
        sz=$(($(cat "$CXL_DEV/$m/ram/size")))
        if [ -z "$min" ] || [ "$sz" -lt "$min" ]; then min=$sz; fi
    done
    per=$(( min / (256 << 20) * (256 << 20) ))
    if [ -n "${CXLVM_REGION_SIZE:-}" ]; then per=$(( CXLVM_REGION_SIZE / ways )); fi
    if [ "$per" -le 0 ]; then cxlvm_log "memdevs have < 256 MiB of RAM capacity"; return 1; fi
    while read -r pos m; do ordered+=("$m"); done < <(_cxl_positions "$rd" "$@")
    if [ "${#ordered[@]}" != "$ways" ]; then cxlvm_log "could not order the targets"; return 1; fi
    cxlvm_log "$rd: ${ways}-way, granularity $gran, position order: ${ordered[*]}"
    r=$(cat "$CXL_DEV/$rd/create_ram_region") || return 1
    _cxl_write "$r" "$CXL_DEV/$rd/create_ram_region" || return 1
    if ! { _cxl_write "$gran" "$CXL_DEV/$r/interleave_granularity" &&
        _cxl_write "$ways" "$CXL_DEV/$r/interleave_ways"; }; then
        _cxl_write "$r" "$CXL_DEV/$rd/delete_region"
        return 1
    fi
    for m in "${ordered[@]}"; do
        d=$(_cxl_free_decoder "$m") || { destroy_region "$r"; return 1; }
        decs+=("$d")
        if ! { _cxl_write ram "$CXL_DEV/$d/mode" &&
            _cxl_write "$(printf '%#x' "$per")" "$CXL_DEV/$d/dpa_size"; }; then
            destroy_region "$r" "${decs[@]}"
            return 1
        fi
    done
    if ! _cxl_write "$(printf '%#x' $((per * ways)))" "$CXL_DEV/$r/size"; then
        destroy_region "$r" "${decs[@]}"; return 1
    fi
    for i in "${!decs[@]}"; do
        if ! _cxl_write "${decs[$i]}" "$CXL_DEV/$r/target$i"; then
            destroy_region "$r" "${decs[@]}"; return 1
        fi
    done
    if ! { _cxl_write 1 "$CXL_DEV/$r/commit" &&
        _cxl_write "$r" /sys/bus/cxl/drivers/cxl_region/bind; }; then
        dmesg | tail -n 5 >&2
        destroy_region "$r" "${decs[@]}"
        return 1
    fi
    # the kernel now creates dax_regionN/daxN.0 and kmem onlines it; wait so
    # callers see the NUMA node
    for i in $(seq 100); do
        ls -d "$CXL_DEV/$r"/dax_region*/dax* > /dev/null 2>&1 && break
        sleep 0.1
    done
    udevadm settle --timeout=30 2>/dev/null || true
    echo "$r"
}

# destroy_region REGION [DECODER...]
# Offline the region's memory, unbind it, reset and free every endpoint
# decoder (the region's targets, plus any DECODERs given: a half-built region
# may have DPA allocated but no targets yet) and delete it from its root
# decoder.  Like `cxl destroy-region`; offlining can fail if the kernel put
# unmovable pages there, and then the region stays (said loudly, returns 1).
destroy_region() {
    local r=$1; shift
    local rd bs start size blk first last t d decs=("$@") rc=0
    [ -e "$CXL_DEV/$r" ] || { cxlvm_log "no region $r"; return 1; }
    rd=$(_cxl_parent "$r")
    if [ -e "$CXL_DEV/$r/driver" ]; then
        bs=$((0x$(cat /sys/devices/system/memory/block_size_bytes)))
        start=$(($(cat "$CXL_DEV/$r/resource")))
        size=$(($(cat "$CXL_DEV/$r/size")))
        first=$((start / bs)); last=$(((start + size) / bs - 1))
        for ((blk = first; blk <= last; blk++)); do
            t=/sys/devices/system/memory/memory$blk/state
            if [ -e "$t" ] && [ "$(cat "$t")" != offline ]; then
                _cxl_write offline "$t" || rc=1
            fi
        done
        [ "$rc" = 0 ] || { cxlvm_log "$r: memory did not go offline; leaving it"; return 1; }
        _cxl_write "$r" /sys/bus/cxl/drivers/cxl_region/unbind || return 1
    fi
    if [ "$(cat "$CXL_DEV/$r/commit")" = 1 ]; then
        _cxl_write 0 "$CXL_DEV/$r/commit" || return 1
    fi
    for t in "$CXL_DEV/$r"/target*; do
        d=$(cat "$t")
        [ -n "$d" ] || continue
        decs+=("$d")
        _cxl_write "" "$t" || rc=1
    done
    for d in $(printf '%s\n' "${decs[@]}" | sort -u); do
        [ "$(($(cat "$CXL_DEV/$d/dpa_size")))" = 0 ] || _cxl_write 0 "$CXL_DEV/$d/dpa_size" || rc=1
    done
    _cxl_write "$r" "$CXL_DEV/$rd/delete_region" || rc=1
    return $rc
}

# cxlvm_cxl_node: the number of the one CPU-less NUMA node that has memory (the node a one-region
# guest's CXL memory came online as); 1, said on stderr, when there is none or more than one.
cxlvm_cxl_node() {
    local n found=""
    for n in /sys/devices/system/node/node[0-9]*; do
        [ -z "$(cat "$n/cpulist")" ] || continue
        [ "$(awk '/MemTotal/ {print $4}' "$n/meminfo")" != 0 ] || continue
        [ -z "$found" ] || { cxlvm_log "more than one CPU-less node with memory: node$found, ${n##*/}"; return 1; }
        found=${n##*node}
    done
    [ -n "$found" ] || { cxlvm_log "no CPU-less node with memory"; return 1; }
    echo "$found"
}

# cxlvm_wait_ready FILE PID [SECONDS]: wait (180 s of guest time by default, whatever each step costs
# under TCG) until FILE is non-empty (a launched program's "ready" file); 1 when process PID died first
# or the time ran out, said on stderr.
cxlvm_wait_ready() {
    local end=$((SECONDS + ${3:-180}))
    while [ $SECONDS -lt $end ]; do
        [ -s "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || { echo "launch $2 died" >&2; return 1; }
        sleep 0.1
    done
    echo "timeout waiting for $1" >&2
    return 1
}

# --- one boot, several checks (harness.run_checks) ---------------------------
# cxlvm_share_regions: from now on create_ram_region hands back the region it
# made before for the same arguments (a region whose memory is online as
# System RAM cannot be taken down reliably once pages were used, and every
# check on one topology asks for the same one), so each check still says
# "R=$(create_ram_region ...)" exactly as in its own boot.
cxlvm_share_regions() {
    eval "$(declare -f create_ram_region | sed '1s/^create_ram_region/_cxlvm_create_ram_region_fresh/')"
    create_ram_region() {
        local key r
        key="/run/cxlvm-region.$(printf '%s_' "$@" | tr -c 'A-Za-z0-9._\n' '_')"
        if [ -s "$key" ] && [ -e "$CXL_DEV/$(cat "$key")" ]; then
            cat "$key"
            return 0
        fi
        r=$(_cxlvm_create_ram_region_fresh "$@") || return 1
        echo "$r" > "$key"
        echo "$r"
    }
}

# cxlvm_peers DIR: what the real tools print at this moment, into DIR (a recorded tree's peers/):
# cxl list -vvv, daxctl list -iDRM, numactl -H, uname -r; each tool's stderr kept only when
# non-empty.  tests/test_inventory_fixtures.py compares every tree's scan with them, so every
# recorder calls this one function (record_fixtures.py's snap, which record_fleet.py and
# record_ras_events.py use too; telemetry_guest.py; test_vm_hmat.py; tests/vm/guest.py's peers()).
cxlvm_peers() {
    local d=$1
    mkdir -p "$d" || return 1
    cxl list -vvv > "$d/cxl-list.json" 2> "$d/cxl-list.err"
    daxctl list -iDRM > "$d/daxctl-list.json" 2> "$d/daxctl-list.err"
    numactl -H > "$d/numactl-H.txt" 2> "$d/numactl-H.err"
    uname -r > "$d/uname-r.txt"
    find "$d" -maxdepth 1 -name '*.err' -empty -delete
}

# cxlvm_check NAME SCRIPT META: run one check's script as its own boot would
# ($OUT is $OUT/NAME; stdout, stderr, exit status and uptimes go to META), then
# put the guest back for the next check: every process the check left behind
# is killed, the cgroups it made are removed, cxlctl's state and config folders
# are cleared (what was left is logged in META/between.log).
cxlvm_check() {
    local name=$1 script=$2 meta=$3 before cg p
    mkdir -p "$OUT/$name" "$meta"
    before=" $(ps -eo pid= | tr '\n' ' ') "
    ls -d /sys/fs/cgroup/*/ 2>/dev/null | sort > "$meta/cgroups-before"
    ls -A /dev/shm | sort > "$meta/shm-before"
    cat /proc/uptime > "$meta/uptime-start"
    (
        export OUT="$OUT/$name"
        cd "$REPO" && . "$script"
    ) > "$meta/stdout.txt" 2> "$meta/stderr.txt" < /dev/null
    echo $? > "$meta/rc"
    cat /proc/uptime > "$meta/uptime-end"
    {
        echo "== after $name"
        for p in $(ps -eo pid=,ppid= | awk '$2 != 2 && $1 != 2 {print $1}'); do
            case "$before" in *" $p "*) continue ;; esac
            [ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] && continue
            [ -e "/proc/$p" ] || continue
            echo "kill leftover $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-120)"
            kill -9 "$p" 2>/dev/null
        done
        sleep 0.5
        ls -d /sys/fs/cgroup/*/ 2>/dev/null | sort | comm -13 "$meta/cgroups-before" - | while read -r cg; do
            echo "remove cgroup $cg"
            rmdir "$cg" 2>/dev/null || echo "  (busy: $(cat "$cg/cgroup.procs" 2>/dev/null | tr '\n' ' '))"
        done
        for p in /sys/kernel/mm/damon/admin/kdamonds/[0-9]*; do
            [ -e "$p/state" ] || continue
            echo "kdamond left: $p $(cat "$p/state")"
            echo off > "$p/state" 2>/dev/null
        done
        [ -e /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds ] && echo 0 > /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds
        for p in /var/lib/cxlctl /run/cxlctl /etc/cxlctl; do
            [ -e "$p" ] && { echo "clear $p: $(find "$p" -type f | head -20 | tr '\n' ' ')"; rm -rf "$p"; }
        done
        ls -A /dev/shm | sort | comm -13 "$meta/shm-before" - | while read -r p; do
            echo "remove /dev/shm/$p"
            rm -rf "/dev/shm/$p"
        done
        grep -E "^(MemFree|Shmem):" /proc/meminfo
        for p in /sys/devices/system/node/node*/meminfo; do grep MemUsed "$p"; done
    } > "$meta/between.log" 2>&1
}
