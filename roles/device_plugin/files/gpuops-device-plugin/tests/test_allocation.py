# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""allocation: topology-scored preferred allocation, spreading replicas, never an error."""

import itertools

from gpus import dgx1_links, node

from gpuops_device_plugin import allocation, resources
from gpuops_device_plugin.config import Config, SharedResource


def setup(count=8, links=None, **config):
    res = resources.build_resources(node(count), Config(**config))[0]
    scores = allocation.pair_scores(links if links is not None else dgx1_links())
    return res, allocation.Allocator(res, scores)


def uuids(res, *indexes):
    by_index = {d.index: i for i, d in res.devices.items() if "::" not in i}
    return [by_index[str(n)] for n in indexes]


def indexes(res, ids):
    return sorted(res.devices[i].gpu_index for i in ids)


def test_pair_scores_come_from_the_link_matrix():
    scores = allocation.pair_scores(dgx1_links())
    assert scores[(0, 3)] == 220  # same CPU + 2 NVLinks
    assert scores[(0, 5)] == 10  # cross CPU, no NVLink


def test_picks_the_best_connected_pair():
    res, allocator = setup()
    chosen = allocator.preferred(list(res.devices), [], 2)
    assert indexes(res, chosen) in ([0, 3], [1, 2], [0, 4], [1, 5], [2, 6], [3, 7], [4, 7], [5, 6])


def test_best_set_is_the_exhaustive_optimum():
    res, allocator = setup()
    scores = allocation.pair_scores(dgx1_links())
    available = uuids(res, 0, 1, 2, 5, 6, 7)
    chosen = allocator.preferred(available, [], 3)

    def total(group):
        return sum(scores[(min(a, b), max(a, b))] for a, b in itertools.combinations(group, 2))

    best = max(total(g) for g in itertools.combinations([0, 1, 2, 5, 6, 7], 3))
    assert total(indexes(res, chosen)) == best


def test_must_include_is_honoured():
    res, allocator = setup()
    must = uuids(res, 5)
    chosen = allocator.preferred(list(res.devices), must, 2)
    assert must[0] in chosen
    assert indexes(res, chosen) in ([1, 5], [4, 5], [5, 6])  # 5's NVLink peers only


def test_nvswitch_gpus_are_all_equal_so_pcie_locality_decides():
    links = [
        {"gpus": [a, b], "score": (20 if (a < 4) == (b < 4) else 10) + 100 * 18}
        for a in range(8)
        for b in range(a + 1, 8)
    ]
    res, allocator = setup(links=links)
    chosen = allocator.preferred(uuids(res, 0, 3, 4, 5, 6, 7), [], 4)
    assert indexes(res, chosen) == [4, 5, 6, 7]  # one NUMA side beats straddling


def test_replicas_are_spread_across_gpus():
    res, allocator = setup(2, shared=(SharedResource("nvidia.com/gpu", 4),))
    chosen = allocator.preferred(sorted(res.devices), [], 2)
    assert indexes(res, chosen) == [0, 1]


def test_replicas_prefer_the_gpu_with_the_most_free_replicas():
    res, allocator = setup(2, shared=(SharedResource("nvidia.com/gpu", 4),))
    gpu0, gpu1 = uuids_of_gpu(res, 0), uuids_of_gpu(res, 1)
    available = gpu0[:1] + gpu1  # GPU 0 already has 3 of 4 replicas in use
    chosen = allocator.preferred(available, [], 2)
    assert indexes(res, chosen) == [1, 1]


def uuids_of_gpu(res, index):
    return sorted(i for i, d in res.devices.items() if d.gpu_index == index)


def test_large_nodes_fall_back_to_greedy_growth():
    links = [
        {"gpus": [a, b], "score": 10 + (100 if a // 8 == b // 8 else 0)}
        for a in range(32)
        for b in range(a + 1, 32)
    ]
    res, allocator = setup(32, links=links)
    chosen = allocator.preferred(list(res.devices), [], 8)
    groups = {res.devices[i].gpu_index // 8 for i in chosen}
    assert len(chosen) == 8
    assert len(groups) == 1


def test_size_equal_to_available_returns_everything_available():
    res, allocator = setup()
    available = uuids(res, 1, 6)
    assert sorted(allocator.preferred(available, [], 2)) == sorted(available)


def test_unknown_ids_are_skipped_not_an_error():
    res, allocator = setup()
    chosen = allocator.preferred(["GPU-bogus", *uuids(res, 0, 3)], [], 2)
    assert indexes(res, chosen) == [0, 3]


def test_a_failure_inside_degrades_to_a_simple_valid_choice(caplog):
    res, allocator = setup()
    allocator.scores = None  # anything that breaks the scoring
    available = uuids(res, 0, 1, 2, 3)
    chosen = allocator.preferred(available, uuids(res, 2), 2)
    assert chosen == [uuids(res, 2)[0], available[0]]
    assert "preferred allocation failed" in caplog.text
