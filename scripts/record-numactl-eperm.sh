#!/usr/bin/env bash
# Record what numactl answers when set_mempolicy(2) is refused, for doctor's inference.seccomp check
# (tests/test_doctor.py replays it): a container's default seccomp profile refuses set_mempolicy with
# EPERM without CAP_SYS_NICE; strace's fault injection makes the kernel's answer the same here.
# Needs strace and numactl; writes fixtures/tools/numactl-localalloc-eperm.json.
set -euo pipefail
cd "$(dirname "$0")/.."
out=fixtures/tools/numactl-localalloc-eperm.json
mkdir -p "$(dirname "$out")"
cmd=(numactl --localalloc true)
set +e
text=$(strace -o /dev/null -e trace=set_mempolicy -e inject=set_mempolicy:error=EPERM "${cmd[@]}" 2>&1)
rc=$?
set -e
python3 - "$out" "$rc" "$text" "$(dpkg-query -W -f='${Version}' numactl 2>/dev/null || echo unknown)" "${cmd[*]}" <<'PY'
import json, sys
out, rc, text, version, cmd = sys.argv[1:]
doc = {
    "command": cmd,
    "recorded_with": "strace -o /dev/null -e trace=set_mempolicy -e inject=set_mempolicy:error=EPERM " + cmd,
    "numactl": version,
    "rc": int(rc),
    "out": text + "\n",
}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(out, doc["rc"], repr(doc["out"]))
PY
