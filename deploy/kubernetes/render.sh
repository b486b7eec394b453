#!/usr/bin/env bash
# The manifests of this directory with their images pinned by digest, on stdout:
#
#   CXLCTL_IMAGE_DIGEST=sha256:... KUBE_RBAC_PROXY_IMAGE_DIGEST=sha256:... VLLM_CXL_IMAGE_DIGEST=sha256:... \
#     deploy/kubernetes/render.sh | kubectl apply -f -
#
# Why: an image by tag is whatever the registry serves under that tag today; by digest it is the
# image that was built and checked (issue 43).  The manifests carry ${…_DIGEST} placeholders, which
# no API server accepts as they are, and this script refuses to render while one is unset or not a
# sha256 digest, so a manifest cannot reach a cluster with a tag.  A digest of an image you built or
# mirrored: `podman image inspect --format '{{.Digest}}' IMAGE` (or `skopeo inspect`).
# tests/test_k8s_manifests.py validates what this renders.
set -euo pipefail
cd "$(dirname "$0")"
vars=(CXLCTL_IMAGE_DIGEST KUBE_RBAC_PROXY_IMAGE_DIGEST VLLM_CXL_IMAGE_DIGEST)
expr=()
for v in "${vars[@]}"; do
  val="${!v:-}"
  if [[ ! "$val" =~ ^sha256:[0-9a-f]{64}$ ]]; then
    echo "render.sh: $v must be the image's digest, sha256:<64 hex digits> (got '${val}')" >&2
    echo "  hint: podman image inspect --format '{{.Digest}}' IMAGE" >&2
    exit 2
  fi
  expr+=(-e "s|\${$v}|$val|g")
done
for f in *.yaml; do
  out=$(sed "${expr[@]}" "$f")
  if grep -q '\${' <<<"$out"; then
    echo "render.sh: $f: a placeholder this script does not know: $(grep -o '\${[A-Z_]*}' <<<"$out" | sort -u | tr '\n' ' ')" >&2
    exit 2
  fi
  printf -- '---\n# %s\n%s\n' "$f" "$out"
done
