#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_cdi_spec
short_description: Generate the node's NVIDIA CDI specification with nvidia-ctk, replaced only when it differs
version_added: 0.1.0
description:
  - Runs C(nvidia-ctk cdi generate) into a private temporary file and replaces the
    specification at O(path) only when the generated one differs, atomically, mode 0644.
    Check mode runs the generation too (it only reads the node) and writes nothing, so its
    C(changed) and diff are what a real run does.
  - Runs it as NVIDIA's C(nvidia-cdi-refresh.service) does, with the variables of
    O(env_file) and systemd's default C(PATH), so that this module and the refresh units
    write the same bytes.
  - On a node without a usable NVIDIA driver (C(libnvidia-ml.so.1) not found, or the
    kernel module not loaded, as nvidia-ctk reports it) nothing is written and the module
    says why in a warning and in RV(message); with O(require_driver=true) that is a failure.
    Any other failure of nvidia-ctk fails the module with nvidia-ctk's error.
author:
  - gpuops.k8s maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  path:
    description:
      - The specification file. The default is where NVIDIA's refresh service writes it,
        C(NVIDIA_CTK_CDI_OUTPUT_FILE_PATH) from O(env_file), else C(/var/run/cdi/nvidia.yaml).
      - The extension picks the format (C(.yaml) or C(.json)), as for C(nvidia-ctk cdi generate --output).
    type: path
  nvidia_ctk:
    description: The nvidia-ctk program.
    type: path
    default: /usr/bin/nvidia-ctk
  env_file:
    description:
      - Variables for nvidia-ctk (C(NVIDIA_CTK_*), one C(VAR=value) a line), the file
        NVIDIA's refresh service reads. A missing file is no variables.
    type: path
    default: /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
  require_driver:
    description: Fail, rather than warn, when the node has no usable NVIDIA driver.
    type: bool
    default: false
  refresh_unit:
    description:
      - The unit that regenerates the specification when the driver changes, named in the
        message when no driver answers. Only used in that message.
    type: str
notes:
  - A specification already at O(path) is left as it is when no driver answers.
seealso:
  - name: NVIDIA Container Toolkit, CDI support
    description: nvidia-ctk cdi generate and the nvidia-cdi-refresh units.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html
"""

EXAMPLES = r"""
- name: Generate /var/run/cdi/nvidia.yaml
  gpuops.k8s.nvidia_cdi_spec:
    refresh_unit: nvidia-cdi-refresh.path

- name: After the driver role, a node without a driver is an error
  gpuops.k8s.nvidia_cdi_spec:
    require_driver: true
"""

RETURN = r"""
path:
  description: The specification file.
  returned: always
  type: str
  sample: /var/run/cdi/nvidia.yaml
driver:
  description:
    - V(present) when nvidia-ctk generated a specification; V(absent) (no NVML library)
      or V(not_loaded) (no kernel module) when it could not for want of a driver.
  returned: always
  type: str
  sample: absent
generated:
  description: A specification was generated (whether or not it differed from the file).
  returned: always
  type: bool
  sample: false
message:
  description: Why no specification was generated; empty when one was.
  returned: always
  type: str
  sample: >-
    No CDI specification generated for /var/run/cdi/nvidia.yaml: no NVIDIA driver is
    installed (NVML's library, libnvidia-ml.so.1, is not found) (nvidia-ctk: failed to
    generate CDI spec: ...).
"""

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s.plugins.module_utils import _cdi_spec as cdi


def read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def env_file_variables(module, path):
    data = read_bytes(path)
    if data is None:
        return {}
    try:
        return cdi.parse_env_file(data.decode("utf-8"))
    except (UnicodeDecodeError, cdi.EnvFileError) as error:
        module.fail_json(msg="%s: %s" % (path, error))


def write(module, path, data):
    """Atomically replace path with data, 0644; its directory is made 0755 if missing."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)


def run(module):
    params = module.params
    if not os.access(params["nvidia_ctk"], os.X_OK):
        module.fail_json(
            msg="%s is not an executable: install the NVIDIA Container Toolkit first" % params["nvidia_ctk"]
        )
    variables = env_file_variables(module, params["env_file"])
    path = cdi.spec_path(params["path"], variables)
    workdir = tempfile.mkdtemp(prefix="nvidia_cdi_spec.", dir=module.tmpdir)
    try:
        output = os.path.join(workdir, os.path.basename(path))
        rc, _out, err = module.run_command(
            [params["nvidia_ctk"], "cdi", "generate", "--output", output],
            environ_update=cdi.generate_environment(variables),
        )
        generated = read_bytes(output) if rc == 0 else None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    current = read_bytes(path)
    result = {"path": path, "changed": False, "generated": False, "driver": cdi.DRIVER_PRESENT, "message": ""}
    if rc != 0 or generated is None:
        state = cdi.classify_failure(err)
        if state is None:
            module.fail_json(msg=cdi.generate_failed_message(rc, err), rc=rc, stderr=err, **result)
        result["driver"] = state
        result["message"] = cdi.no_driver_message(
            state, err, path, current is not None, params["refresh_unit"]
        )
        if params["require_driver"]:
            module.fail_json(msg=result["message"], rc=rc, **result)
        module.warn(result["message"])
        return result

    result["generated"] = True
    result["changed"] = generated != current
    if result["changed"]:
        result["diff"] = {
            "before_header": path,
            "after_header": path,
            "before": (current or b"").decode("utf-8", "replace"),
            "after": generated.decode("utf-8", "replace"),
        }
        if not module.check_mode:
            write(module, path, generated)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            nvidia_ctk=dict(type="path", default="/usr/bin/nvidia-ctk"),
            env_file=dict(type="path", default=cdi.DEFAULT_ENV_FILE),
            require_driver=dict(type="bool", default=False),
            refresh_unit=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
