# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Preferred allocation (pure): which of the available devices a container should get.

Pair scores come from the link matrix read once at start (gpu_info's `links`): NVIDIA's
best-effort table (PCIe relation points + 100 per NVLink), with NVSwitch-connected GPUs
scored as fully connected at their link count. The best set is the one with the highest
sum of pair scores that holds every `must_include` device. Replicas of shared GPUs are
spread across physical GPUs instead. Never raises: on any surprise the caller gets a
simple, valid choice, because an RPC error here fails the pod's admission.
"""

from __future__ import annotations

import itertools
import logging
import math

from .resources import Resource

LOG = logging.getLogger(__name__)
SAME_GPU = 10_000  # two MIG devices on one GPU share its memory fabric
MAX_SETS = 20_000  # beyond this many candidate sets, grow the set greedily instead


def pair_scores(links: list[dict]) -> dict[tuple[int, int], int]:
    """{(gpu a, gpu b): score} for a < b, from gpu_info's link matrix."""
    return {(min(p["gpus"]), max(p["gpus"])): p["score"] for p in links}


class Allocator:
    def __init__(self, resource: Resource, scores: dict[tuple[int, int], int]):
        self.resource = resource
        self.scores = scores

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        try:
            return self._preferred(available, must_include, size)
        except Exception:
            LOG.exception("preferred allocation failed for %s; answering in order", self.resource.name)
            return _simple(available, must_include, size)

    def _preferred(self, available, must_include, size):
        known = [i for i in available if i in self.resource.devices]
        must = [i for i in must_include if i in self.resource.devices]
        if size <= len(must) or len(known) <= size:
            return _simple(known, must, size)
        candidates = [i for i in known if i not in must]
        needed = size - len(must)
        if self.resource.shared:
            return must + self._spread(candidates, needed)
        if math.comb(len(candidates), needed) > MAX_SETS:
            return self._greedy(must, candidates, needed)
        best, best_score = None, -1
        for extra in itertools.combinations(candidates, needed):
            chosen = must + list(extra)
            score = self._set_score(chosen)
            if score > best_score:
                best, best_score = chosen, score
        return best

    def _pair(self, a: str, b: str) -> int:
        ga = self.resource.devices[a].gpu_index
        gb = self.resource.devices[b].gpu_index
        if ga == gb:
            return SAME_GPU
        return self.scores.get((min(ga, gb), max(ga, gb)), 0)

    def _set_score(self, ids):
        return sum(self._pair(a, b) for a, b in itertools.combinations(ids, 2))

    def _greedy(self, must, candidates, needed):
        chosen = list(must)
        pool = list(candidates)
        if not chosen:
            chosen.append(pool.pop(0))
            needed -= 1
        for _round in range(needed):
            best = max(pool, key=lambda c: sum(self._pair(c, x) for x in chosen))
            pool.remove(best)
            chosen.append(best)
        return chosen

    def _spread(self, candidates, needed):
        """Replicas from the GPUs with the most replicas still free (NVIDIA's distributed policy)."""
        free: dict[str, int] = {}
        for device_id in candidates:
            uuid = self.resource.devices[device_id].uuid
            free[uuid] = free.get(uuid, 0) + 1
        total: dict[str, int] = {}
        for device in self.resource.devices.values():
            if device.uuid in free:
                total[device.uuid] = total.get(device.uuid, 0) + 1
        pool, chosen = list(candidates), []
        for _round in range(needed):
            pool.sort(
                key=lambda i: total[self.resource.devices[i].uuid] - free[self.resource.devices[i].uuid]
            )
            pick = pool.pop(0)
            free[self.resource.devices[pick].uuid] -= 1
            chosen.append(pick)
        return chosen


def _simple(available, must_include, size):
    chosen = list(must_include)[:size]
    for device_id in available:
        if len(chosen) >= size:
            break
        if device_id not in chosen:
            chosen.append(device_id)
    return chosen
