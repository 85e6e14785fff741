# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end: the GPUs for the kubelet's Dynamic Resource Allocation, driver
gpu.gpuops.k8s, one pool per node named for the node, devices gpu-<index>.

It sits beside the device plugin front end (server, registrar) over the same discovery and
health; a node runs one of the two. Parts: devices (names, the driver), claims (a
ResourceClaim's allocation, read through the API), opaque (our driver's parameters in a
claim), checkpoint (prepared claims, on disk), cdi (a CDI spec per claim on the toolkit's),
prepare (NodePrepareResources / NodeUnprepareResources, pure of gRPC), health (what the
health stream reports), server (gRPC translation) and endpoint (the two sockets).
"""
