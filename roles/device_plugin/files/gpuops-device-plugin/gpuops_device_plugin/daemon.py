# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wiring and lifecycle: start, the control loop, SIGHUP reload, SIGTERM stop.

The process serves one front end, `frontEnd` in the configuration: the device plugin
(Plugin, here) or DRA (dra.frontend.DraFrontEnd, whose docstring says why never both).
A reload keeps the front end: a change of it is refused until the service restarts.

Exit status: 0 stopped by a signal; 1 NVML failed and failOnInitError is true (device
plugin only: the DRA front end serves without NVML, for Unprepare); 2 the configuration is
invalid (nothing was served).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import sys
import threading

from . import allocation, resources
from . import config as config_mod
from ._plugin_config import FRONT_END_DRA
from .discovery import DiscoveryError, Nvml
from .dra.checkpoint import CheckpointError
from .dra.frontend import DraFrontEnd, FrontEndError
from .health import HealthState, HealthWatcher
from .metrics import Metrics
from .registrar import KUBELET_SOCKET, DirectoryWatcher, Endpoint
from .server import DevicePluginService

LOG = logging.getLogger("gpuops_device_plugin")
TICK_S = 0.2
REGISTER_RETRY_S = 5.0


class Plugin:
    """Everything that a reload rebuilds: discovery, resources, endpoints, health."""

    def __init__(self, config, nvml, metrics):
        self.config = config
        self.nvml = nvml
        self.metrics = metrics
        self.health = HealthState()
        self.endpoints: list[Endpoint] = []
        self.watcher = None

    def start(self) -> None:
        facts = self.nvml.discover()
        for lost in facts["lost_gpus"]:
            LOG.warning("GPU %s does not answer and is not offered: %s", lost["index"], lost["error"])
        offered = resources.build_resources(facts["gpus"], self.config)
        scores = allocation.pair_scores(facts["links"])
        for resource in offered:
            service = DevicePluginService(
                resource, self.config, self.health, allocation.Allocator(resource, scores), self.metrics
            )
            self.endpoints.append(Endpoint(service, self.config.plugin_dir, self.metrics))
        LOG.info(
            "found %d GPUs; offering %s",
            len(facts["gpus"]),
            ", ".join("%s x%d" % (r.name, len(r.devices)) for r in offered) or "nothing",
        )
        if self.config.health_enabled and facts["gpus"]:
            self.watcher = HealthWatcher(
                self.nvml,
                facts["gpus"],
                self.health,
                self.config,
                # The nodes containers are given (pass-device-specs) are the ones checked.
                dev_dir=os.path.join(self.config.nvidia_dev_root, "dev"),
                metrics=self.metrics,
            )
            self.watcher.start()
        for endpoint in self.endpoints:
            endpoint.serve()

    def socket_names(self) -> set[str]:
        return {e.socket_name for e in self.endpoints}

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        for endpoint in self.endpoints:
            endpoint.stop()


class Daemon:
    def __init__(self, argv, environ):
        self.argv = argv
        self.environ = environ
        self.commands: queue.Queue = queue.Queue()
        self.pending_signal = None
        self.metrics = Metrics()
        self.nvml = Nvml()
        self.nvml_usable = True
        self.plugin = None

    def on_signal(self, signum, _frame) -> None:
        # No locks in a signal handler: the loop polls this attribute.
        self.pending_signal = signum

    def run(self, config) -> int:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGHUP, self.on_signal)
        if config.front_end == FRONT_END_DRA:
            return self.run_dra(config)
        try:
            self.nvml.start()
        except DiscoveryError as error:
            LOG.error("NVML is not usable: %s", error)
            if config.fail_on_init_error:
                return 1
            LOG.warning("failOnInitError is false: serving nothing until stopped")
            return self.loop(None)
        try:
            self.plugin = Plugin(config, self.nvml, self.metrics)
            self.plugin.start()
        except resources.ResourceError as error:
            LOG.error("invalid configuration for this node: %s", error)
            self.plugin.stop()
            self.nvml.stop()
            return 2
        self.metrics.serve(config.metrics_address)
        watcher = DirectoryWatcher(config.plugin_dir, self.plugin.socket_names, self.commands)
        watcher.start()
        try:
            self.restart_endpoints(self.plugin.endpoints)
            return self.loop(watcher)
        finally:
            watcher.stop()
            self.plugin.stop()
            self.metrics.shutdown()
            self.nvml.stop()

    def run_dra(self, config) -> int:
        """The DRA front end: it serves even where NVML is not usable (see its docstring)."""
        try:
            self.nvml.start()
            self.nvml_usable = True
        except DiscoveryError as error:
            LOG.error("NVML is not usable: %s; serving DRA without GPUs (Unprepare works)", error)
            self.nvml_usable = False
        try:
            self.plugin = self.front_end(config)
            self.plugin.start()
        except (FrontEndError, CheckpointError, OSError) as error:
            LOG.error("the DRA front end cannot start on this node: %s", error)
            self.plugin.stop()
            self.stop_nvml()
            return 2
        self.metrics.serve(config.metrics_address)
        try:
            return self.loop(None)
        finally:
            self.plugin.stop()
            self.metrics.shutdown()
            self.stop_nvml()

    def stop_nvml(self) -> None:
        if self.nvml_usable:
            self.nvml.stop()

    def front_end(self, config):
        """A front end for config, not started."""
        if config.front_end == FRONT_END_DRA:
            return DraFrontEnd(config, self.nvml, self.metrics, nvml_usable=self.nvml_usable)
        return Plugin(config, self.nvml, self.metrics)

    def retry_later(self) -> None:
        timer = threading.Timer(REGISTER_RETRY_S, lambda: self.commands.put(("kubelet",)))
        timer.daemon = True
        timer.start()

    def loop(self, watcher) -> int:
        while True:
            signum, self.pending_signal = self.pending_signal, None
            if signum in (signal.SIGTERM, signal.SIGINT):
                LOG.info("stopping on %s", signal.Signals(signum).name)
                return 0
            if signum == signal.SIGHUP and self.plugin is not None:
                self.reload()
            try:
                command = self.commands.get(timeout=TICK_S)
            except queue.Empty:
                continue
            if self.plugin is None:
                continue
            if command[0] == "kubelet":
                LOG.info("kubelet socket (re)created: registering again")
                self.restart_endpoints(self.plugin.endpoints)
            elif command[0] == "socket":
                for endpoint in self.plugin.endpoints:
                    if endpoint.socket_name == command[1] and not endpoint.serving():
                        LOG.warning("our socket %s was removed: serving and registering again", endpoint.path)
                        self.restart_endpoints([endpoint])

    def restart_endpoints(self, endpoints) -> None:
        """Serve again where our socket is gone, then register if the kubelet is there."""
        ok = True
        for endpoint in endpoints:
            served = False
            if not endpoint.serving():
                endpoint.serve()
                served = True
            # One kubelet restart brings both events (our socket gone, kubelet.sock new):
            # register once per kubelet.sock unless our server changed.
            if not os.path.exists(os.path.join(endpoint.plugin_dir, KUBELET_SOCKET)):
                # Nothing to retry: the watcher hears kubelet.sock appear.
                LOG.info("waiting for the kubelet (%s)", os.path.join(endpoint.plugin_dir, KUBELET_SOCKET))
                continue
            if served or not endpoint.registered_with_current_kubelet():
                ok = endpoint.register() and ok
        if not ok:
            self.retry_later()

    def reload(self) -> None:
        LOG.info("SIGHUP: reloading the configuration and rediscovering GPUs")
        try:
            config = config_mod.load(self.argv, self.environ)
        except config_mod.ConfigError as error:
            LOG.error("reload refused, keeping the running configuration: %s", error)
            return
        old = self.plugin
        if config.front_end != old.config.front_end:
            LOG.error(
                "reload refused, keeping the running configuration: frontEnd %r is not the running %r;"
                " restart the service to change it",
                config.front_end,
                old.config.front_end,
            )
            return
        old.stop()
        fresh = self.front_end(config)
        try:
            fresh.start()
        except (resources.ResourceError, DiscoveryError, FrontEndError, CheckpointError, OSError) as error:
            LOG.error("reload failed, restoring the running configuration: %s", error)
            fresh.stop()
            fresh = self.front_end(old.config)
            fresh.start()
        self.plugin = fresh
        log_config(fresh.config)
        self.restart_endpoints(fresh.endpoints)


def log_config(config) -> None:
    LOG.info("effective configuration: %s", json.dumps(config.describe(), sort_keys=True))


def main(argv=None, environ=None) -> int:
    environ = os.environ if environ is None else environ
    try:
        args = config_mod.parser().parse_args(argv)
        config = config_mod.load(argv, environ)
    except config_mod.ConfigError as error:
        print("gpuops-device-plugin: invalid configuration: %s" % error, file=sys.stderr)
        return 2
    if args.check_config:
        print(json.dumps(config.describe(), indent=2, sort_keys=True))
        return 0
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    log_config(config)
    return Daemon(argv, environ).run(config)
