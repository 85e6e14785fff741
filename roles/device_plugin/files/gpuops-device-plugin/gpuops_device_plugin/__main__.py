# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`python -m gpuops_device_plugin`: run the daemon."""

import sys

from .daemon import main

sys.exit(main())
