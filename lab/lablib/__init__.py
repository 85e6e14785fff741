# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's parts, a room each. The command lines on top of them are lab/cluster.py (the
host's single-node Kubernetes) and lab/nodes.py (the lab's Kubernetes nodes), run as
scripts: their own directory, lab/, is then on sys.path, and so is this package.

Imports go one way: a command line imports rooms, a room imports only the rooms above
it in this list, and no room imports a command line.

    layout           where the host's lab lives: directories, addresses, ports, names
    processes        errors, logging, commands; components started and stopped by PID
    pki              the lab's CA, certificates and kubeconfigs
    images           the lab's binaries and container images
    health           what answers: HTTP(S), kubectl, whether a Node is Ready
    control_plane    etcd, kube-apiserver, kube-controller-manager, kube-scheduler
    host_node        the host as the lab's node: bridge, CNI, containerd, kubelet
    device_plugin    the host node's mock GPUs and our device plugin over them
    teardown         what `lab/cluster.py down` stops, unmounts and removes
    node_containers  the lab's Kubernetes nodes as podman containers
    mirror           the package mirror the host serves to those nodes
    node_join        what a node gets when it joins: configs, certificates, SSH, inventory
"""
