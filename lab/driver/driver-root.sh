#!/usr/bin/env bash
# Lay out a lab NVIDIA driver root the way NVIDIA's own mock deployment does
# (k8s-test-infra: the mock libraries under the driver root, device nodes made with
# mknod), for the GPUs of one profile:
#   lab/driver/driver-root.sh ROOT PROFILE [--no-devices]
#
#   ROOT/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<driver>  NVIDIA's mock NVML (+ .so.1)
#   ROOT/usr/lib/x86_64-linux-gnu/libcuda.so.<driver>       NVIDIA's mock CUDA (+ .so.1)
#   ROOT/usr/bin/nvidia-smi                                  NVIDIA's own (lab/driver/nvidia-smi.sh)
#   ROOT/usr/share/gpuops-lab-driver/profile.yaml           PROFILE, the GPUs they report
#   ROOT/usr/config/config.yaml -> ../share/gpuops-lab-driver/profile.yaml
#       where NVIDIA's mock looks for its profile when MOCK_NVML_CONFIG is unset (two
#       levels above the directory it was loaded from), so every NVML user on the node
#       (nvidia-ctk, NVIDIA's nvidia-cdi-refresh, the device plugin) sees these GPUs
#   ROOT/dev/nvidia0..N-1 (c 195 i), nvidiactl (c 195 255),
#   ROOT/dev/nvidia-uvm (c 510 0), nvidia-uvm-tools (c 510 1)
#
# <driver> is the profile's system.driver_version, N its number of devices. The device
# nodes need root (mknod); --no-devices leaves them out (a package build, whose postinst
# makes them on the node: lab/driver/build-repo.sh). Nothing here is NVIDIA's driver: the
# libraries are NVIDIA's mocks (lab/mocknvml/build.sh), nvidia-smi is NVIDIA's binary over
# them, and no kernel module backs the nodes, so opening one fails as on a node whose
# module did not load.
set -euo pipefail
root=${1:?usage: driver-root.sh ROOT PROFILE [--no-devices]}
profile=${2:?usage: driver-root.sh ROOT PROFILE [--no-devices]}
devices=${3:-}
[[ -z $devices || $devices == --no-devices ]] || { echo "driver-root.sh: unknown option $devices" >&2; exit 2; }
[[ -f $profile ]] || { echo "driver-root.sh: no profile at $profile" >&2; exit 2; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The two facts the layout needs, read the way the mock reads them (YAML).
read -r version count < <(python3 - "$profile" <<'PY'
import sys

import yaml

doc = yaml.safe_load(open(sys.argv[1]))
print(doc["system"]["driver_version"], len(doc.get("devices") or []))
PY
)
[[ $version =~ ^[0-9]+(\.[0-9]+)+$ ]] || { echo "driver-root.sh: $profile: driver_version $version is no driver version" >&2; exit 2; }

mock=$(bash "$repo/lab/mocknvml/build.sh" | tail -n 1)
lib=$root/usr/lib/x86_64-linux-gnu
mkdir -p "$lib" "$root/usr/share/gpuops-lab-driver"
for name in libnvidia-ml libcuda; do
    # The mock is built as driver 550.163.01; a driver root for another version carries
    # the same library under that version's name, as a real driver's files are named.
    cp "$(readlink -f "$mock/$name.so.1")" "$lib/$name.so.$version"
    ln -sfn "$name.so.$version" "$lib/$name.so.1"
done
# NVIDIA's nvidia-smi (Debian's package of it), where a driver puts it: NVIDIA's DRA driver
# checks the driver root with it; here it reads the mock NVML above.
smi=$(bash "$repo/lab/driver/nvidia-smi.sh")
install -D -m 0755 "$smi" "$root/usr/bin/nvidia-smi"
cp "$profile" "$root/usr/share/gpuops-lab-driver/profile.yaml"
mkdir -p "$root/usr/config"
ln -sfn ../share/gpuops-lab-driver/profile.yaml "$root/usr/config/config.yaml"

if [[ -z $devices ]]; then
    mkdir -p "$root/dev"
    node() { [[ -c $root/dev/$1 ]] || mknod -m 0666 "$root/dev/$1" c "$2" "$3"; }
    for ((i = 0; i < count; i++)); do node "nvidia$i" 195 "$i"; done
    node nvidiactl 195 255
    node nvidia-uvm 510 0
    node nvidia-uvm-tools 510 1
    # Fewer GPUs than the last layout (a smaller profile): their nodes go too.
    for extra in "$root"/dev/nvidia[0-9]*; do
        [[ -e $extra ]] || continue
        index=${extra##*/nvidia}
        ((index < count)) || rm -f "$extra"
    done
fi
echo "$root"
