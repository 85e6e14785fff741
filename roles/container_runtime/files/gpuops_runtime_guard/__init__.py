# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuops runtime drift guard: keep the NVIDIA runtime in the container runtime's configuration.

The container_runtime role copies this package to the node and runs it from systemd (a
.path unit on the configuration files, a .timer as a safety net). It plans with the same
code as the nvidia_runtime module (the files in _runtime are links to the collection's
module_utils/_runtime package) and restarts the runtime only when the effective configuration
changed. Needs python3 and python3-tomlkit only.
"""

__version__ = "0.1.0"
