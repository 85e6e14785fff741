# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_driver's preflight: the Secure Boot state it reports, from what its tasks register
(roles/nvidia_driver/tasks/preflight.yml), rendered by the real ansible-playbook. Secure Boot
on decides whether DKMS's module can load, and no lab machine has EFI to show it."""

import base64

from resolve import hosts_inventory, resolve, task_arg

EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
MOKUTIL = "/usr/bin/mokutil"


def preflight(mokutil=False, efivar=False):
    """What node_state_info's one look answered."""
    return {"paths": {MOKUTIL: {"exists": mokutil}, EFIVAR: {"exists": efivar}}}


def efivar(state):
    """The variable as efivarfs gives it: four attribute bytes, then the state byte."""
    return {"content": base64.b64encode(b"\x06\x00\x00\x00" + bytes([state])).decode()}


CASES = {
    "mokutil-on": (
        {
            "__nvidia_driver_preflight_state": preflight(mokutil=True, efivar=True),
            "__nvidia_driver_mokutil_state": {"stdout": "SecureBoot enabled", "stderr": ""},
        },
        "enabled (mokutil)",
    ),
    "mokutil-no-efi": (
        {
            "__nvidia_driver_preflight_state": preflight(mokutil=True),
            "__nvidia_driver_mokutil_state": {
                "stdout": "",
                "stderr": "EFI variables are not supported on this system",
            },
        },
        "EFI variables are not supported on this system (mokutil)",
    ),
    "efi-on": (
        {
            "__nvidia_driver_preflight_state": preflight(efivar=True),
            "__nvidia_driver_efivar_content": efivar(1),
        },
        "enabled (EFI variable)",
    ),
    "efi-off": (
        {
            "__nvidia_driver_preflight_state": preflight(efivar=True),
            "__nvidia_driver_efivar_content": efivar(0),
        },
        "disabled (EFI variable)",
    ),
    "bios": ({"__nvidia_driver_preflight_state": preflight()}, "unknown / legacy BIOS"),
}


def test_the_secure_boot_state_comes_from_mokutil_else_the_efi_variable(tmp_path):
    hosts = {name: dict(case[0], __nvidia_driver_efivar_path=EFIVAR) for name, case in CASES.items()}
    expression = task_arg(
        "nvidia_driver",
        "preflight.yml",
        "Sum up what the checks found",
        "ansible.builtin.set_fact",
        "__nvidia_driver_secure_boot",
    )
    found = resolve(hosts_inventory(tmp_path, hosts), [], exprs={"state": expression}, tmp_path=tmp_path)
    assert {name: found[name]["state"].strip() for name in CASES} == {
        name: case[1] for name, case in CASES.items()
    }
