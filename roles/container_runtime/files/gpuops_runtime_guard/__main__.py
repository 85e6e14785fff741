# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`python3 -m gpuops_runtime_guard --config FILE`: one guard run."""

import sys

from .guard import main

sys.exit(main())
