# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU descriptions in gpu_info's shape, for the pure tests (resources, allocation)."""

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


def gpu(index, name=H100, mig=None, numa=None):
    return {
        "index": index,
        "uuid": "GPU-%08d-0000-0000-0000-000000000000" % index,
        "name": name,
        "minor_number": index,
        "numa_node": numa,
        "mig": {"current": "enabled" if mig else "disabled", "devices": mig or []},
    }


def mig(gpu_index, slot, profile, gi):
    return {
        "index": slot,
        "uuid": "MIG-%d-%d-0000-0000-0000-000000000000" % (gpu_index, slot),
        "profile": profile,
        "gpu_instance_id": gi,
    }


def node(count=8, name=H100):
    return [gpu(i, name, numa=0 if i < count // 2 else 1) for i in range(count)]


def dgx1_links():
    """A DGX-1 style hybrid cube mesh: two quads fully linked inside, pairs across."""
    nvlinks = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (1, 2): 2, (1, 3): 1, (2, 3): 1}
    nvlinks.update({(a + 4, b + 4): n for (a, b), n in list(nvlinks.items())})
    nvlinks.update({(0, 4): 2, (1, 5): 2, (2, 6): 2, (3, 7): 2})
    links = []
    for a in range(8):
        for b in range(a + 1, 8):
            pcie = 20 if (a < 4) == (b < 4) else 10
            links.append({"gpus": [a, b], "score": pcie + 100 * nvlinks.get((a, b), 0)})
    return links
