# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_driver asks apt to install its packages only where the preflight's read of the
installed packages does not already show each one at a version the pattern matches
(roles/nvidia_driver/vars/main.yml: __nvidia_driver_packages_current), as apt itself
decides (the apt module's fnmatch of the installed version): a converged node's run asks
apt nothing, and any doubt leaves the decision to apt. The role's own expression, evaluated
by the real ansible-playbook over package_facts' shape of the list."""

import yaml
from resolve import ROLES, hosts_inventory, resolve


def installed(**versions):
    """package_facts' ansible_facts.packages: name -> [{name, version, ...}, ...]."""
    return {
        name: [{"name": name, "version": version, "arch": "amd64", "source": "apt"} for version in found]
        for name, found in versions.items()
    }


PACKAGES = ["nvidia-driver", "nvidia-kernel-dkms"]
CASES = {
    "both-at-the-pattern": (
        installed(**{"nvidia-driver": ["550.163.01-1"], "nvidia-kernel-dkms": ["550.163.01-1"]}),
        True,
    ),
    "one-at-another-version": (
        installed(**{"nvidia-driver": ["550.163.01-1"], "nvidia-kernel-dkms": ["535.247.01-1"]}),
        False,
    ),
    "one-missing": (installed(**{"nvidia-driver": ["550.163.01-1"]}), False),
    # apt's fnmatch of "1:550..." against the pattern does not match either: apt decides.
    "an-epoch": (
        installed(**{"nvidia-driver": ["1:550.163.01-1"], "nvidia-kernel-dkms": ["550.163.01-1"]}),
        False,
    ),
    # Two architectures of one package, one of them at the pattern.
    "multiarch": (
        installed(
            **{"nvidia-driver": ["535.247.01-1", "550.163.01-1"], "nvidia-kernel-dkms": ["550.163.01-1"]}
        ),
        True,
    ),
    "no-package-list": (None, False),
}


def test_apt_is_asked_unless_every_package_is_installed_at_the_pattern(tmp_path):
    role_vars = yaml.safe_load((ROLES / "nvidia_driver" / "vars" / "main.yml").read_text(encoding="utf-8"))
    # The facts a play reads as ansible_facts, given here as a host variable of each case.
    expression = role_vars["__nvidia_driver_packages_current"].replace(
        "ansible_facts['packages'] | default({})", "test_packages | default({}, true)"
    )
    assert expression != role_vars["__nvidia_driver_packages_current"]
    hosts = {
        name: {
            "test_packages": packages,
            "nvidia_driver_packages": PACKAGES,
            "nvidia_driver_version": "550.163.01*",
        }
        for name, (packages, _current) in CASES.items()
    }
    found = resolve(hosts_inventory(tmp_path, hosts), [], exprs={"current": expression}, tmp_path=tmp_path)
    assert {name: found[name]["current"] for name in CASES} == {name: case[1] for name, case in CASES.items()}
