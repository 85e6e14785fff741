# Sourced by the lab's Kubernetes scripts (build.sh, images.sh): which release the lab
# runs. KUBE_VERSION picks another served release (e.g. KUBE_VERSION=v1.35.4 make site);
# each has its module pinned under releases/<version>/ (go.mod and go.sum, made by pin.sh).
# shellcheck shell=bash
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
kube_module="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/releases/$KUBE_VERSION"
if [[ ! -f "$kube_module/go.mod" ]]; then
  pinned=("$(dirname "$kube_module")"/v*)
  echo "KUBE_VERSION=$KUBE_VERSION: no pinned module at $kube_module; pinned here:" \
    "${pinned[*]##*/} (pin another served release with lab/kube/pin.sh $KUBE_VERSION)" >&2
  exit 2
fi
export KUBE_VERSION
