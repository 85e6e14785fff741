# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""config: NVIDIA's v1 schema, our extensions, precedence, and errors that name the field."""

import textwrap

import pytest

from gpuops_device_plugin import config as cfg

NVIDIA_EXAMPLE = """\
version: v1
flags:
  migStrategy: mixed
  failOnInitError: false
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-cri]
    deviceIDStrategy: index
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


def write(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_defaults_match_nvidias():
    config = cfg.load([], {})
    assert config.mig_strategy == "none"
    assert config.fail_on_init_error is True
    assert config.device_list_strategy == ("envvar",)
    assert config.device_id_strategy == "uuid"
    assert config.ignored_xids == frozenset({13, 31, 43, 45, 68, 109})
    assert config.plugin_dir == "/var/lib/kubelet/device-plugins"


def test_nvidias_v1_file_is_read(tmp_path):
    config = cfg.load(["--config-file", write(tmp_path, NVIDIA_EXAMPLE)], {})
    assert config.mig_strategy == "mixed"
    assert config.fail_on_init_error is False
    assert config.pass_device_specs is True
    assert config.device_list_strategy == ("envvar", "cdi-cri")
    assert config.device_id_strategy == "index"
    assert config.rename_by_default and config.fail_requests_greater_than_one
    assert config.shared == (cfg.SharedResource("nvidia.com/gpu", 4),)


def test_flag_beats_env_beats_file(tmp_path):
    path = write(tmp_path, NVIDIA_EXAMPLE)
    assert cfg.load(["--config-file", path], {"MIG_STRATEGY": "single"}).mig_strategy == "single"
    assert (
        cfg.load(["--mig-strategy", "none"], {"MIG_STRATEGY": "single", "CONFIG_FILE": path}).mig_strategy
        == "none"
    )
    assert cfg.load([], {"CONFIG_FILE": path}).mig_strategy == "mixed"


def test_env_list_and_bool_forms():
    config = cfg.load(
        [], {"DEVICE_LIST_STRATEGY": "volume-mounts,cdi-annotations", "PASS_DEVICE_SPECS": "yes"}
    )
    assert config.device_list_strategy == ("volume-mounts", "cdi-annotations")
    assert config.pass_device_specs is True


def test_per_device_replicas_and_health_extensions(tmp_path):
    path = write(
        tmp_path,
        """\
        version: v1
        sharing:
          timeSlicing:
            resources:
              - name: nvidia.com/gpu
                replicas: 2
                perDevice:
                  - model: NVIDIA H100 80GB HBM3
                    replicas: 4
                  - index: 3
                    replicas: 1
        health:
          additionalIgnoredXids: [94]
          criticalXids: [109]
          probeIntervalSeconds: 0.5
          recovery:
            quietPeriodSeconds: 30
        metrics:
          address: "127.0.0.1:9999"
        """,
    )
    config = cfg.load(["--config-file", path], {})
    rules = config.shared[0].per_device
    assert rules == (cfg.PerDevice(4, model="NVIDIA H100 80GB HBM3"), cfg.PerDevice(1, index="3"))
    assert config.ignored_xids == frozenset({13, 31, 43, 45, 68, 94})  # 94 added, 109 made critical
    assert (config.probe_interval_seconds, config.recovery_quiet_seconds) == (0.5, 30.0)
    assert config.metrics_address == "127.0.0.1:9999"


def test_nvidias_health_env_vars():
    assert cfg.load([], {"DP_DISABLE_HEALTHCHECKS": "all"}).health_enabled is False
    config = cfg.load([], {"DP_DISABLE_HEALTHCHECKS": "48, 94", "DP_ENABLE_HEALTHCHECKS": "13"})
    assert config.health_enabled is True
    assert config.ignored_xids == frozenset({31, 43, 45, 48, 68, 94, 109})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v2\n", "version: 'v2' is not supported; valid: v1"),
        ("flags:\n  migStrategy: maybe\n", "migStrategy: 'maybe' is not valid; valid: none, single, mixed"),
        (
            "flags:\n  failOnInitError: 'no'\n",
            "flags.failOnInitError: 'no' is not valid; expected true or false",
        ),
        ("flags:\n  plugin:\n    deviceListStrategy: env\n", "deviceListStrategy: 'env' is not valid"),
        ("flags:\n  plugin:\n    deviceIDStrategy: serial\n", "deviceIDStrategy: 'serial' is not valid"),
        (
            "flagz: {}\n",
            "flagz: {} is not valid; unknown key; valid keys here: dra, flags, frontEnd, health, metrics",
        ),
        ("frontEnd: kubelet\n", "frontEnd: 'kubelet' is not valid; valid: devicePlugin, dra"),
        ("frontEnd: [dra]\n", "frontEnd: ['dra'] is not valid; expected a string"),
        (
            "dra:\n  driver: gpu.example.com\n",
            "dra.driver: 'gpu.example.com' is not valid; unknown key; valid keys here: cdiDir, "
            "extendedResourceName, kubeconfig,",
        ),
        ("dra:\n  cdiDir: run/cdi\n", "dra.cdiDir: 'run/cdi' is not valid; expected an absolute path"),
        ("dra:\n  kubeconfig: 3\n", "dra.kubeconfig: 3 is not valid; expected a string"),
        (
            "dra:\n  extendedResourceName: gpu\n",
            "dra.extendedResourceName: 'gpu' is not valid; expected an extended resource name like "
            "nvidia.com/gpu (a domain, a slash, a name), or empty for none",
        ),
        ("dra:\n  resyncSeconds: 0\n", "dra.resyncSeconds: 0 is not valid; expected a number of seconds > 0"),
        (
            "frontEnd: dra\nsharing:\n  timeSlicing:\n    resources:\n"
            "      - {name: nvidia.com/gpu, replicas: 2}\n",
            "sharing.timeSlicing.resources: replicas are not valid with frontEnd dra; valid: none",
        ),
        (
            "sharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 0\n",
            "sharing.timeSlicing.resources[0].replicas: 0 is not valid; expected an integer >= 1",
        ),
        (
            "sharing:\n  timeSlicing:\n    resources:\n"
            "      - {name: nvidia.com/gpu, replicas: 2, perDevice: [{replicas: 2}]}\n",
            "perDevice[0]: {'replicas': 2} is not valid; needs `replicas` and at least one of uuid",
        ),
        (
            "health:\n  ignoredXids: [13, -1]\n",
            "health.ignoredXids: -1 is not valid; expected an integer >= 1",
        ),
        (
            "health:\n  recovery:\n    quietPeriodSeconds: 0\n",
            "quietPeriodSeconds: 0 is not valid; expected a number",
        ),
        (
            "metrics:\n  address: localhost\n",
            "metrics.address: 'localhost' is not valid; expected [host]:port",
        ),
        ("flags: [1]\n", "flags: [1] is not valid; expected a mapping"),
        ("flags: {migStrategy: [\n", "not valid YAML"),
    ],
)
def test_bad_files_name_the_field_the_value_and_what_is_valid(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(cfg.ConfigError) as caught:
        cfg.load(["--config-file", path], {})
    assert message in str(caught.value)


def test_errors_in_a_file_name_the_file(tmp_path):
    path = write(tmp_path, "flags:\n  plugin: {deviceIDStrategy: 3}\n")
    with pytest.raises(
        cfg.ConfigError, match=r"config file .*config\.yaml: flags\.plugin\.deviceIDStrategy: 3"
    ):
        cfg.load(["--config-file", path], {})


def test_missing_file_is_named(tmp_path):
    with pytest.raises(cfg.ConfigError, match=r"missing.yaml: cannot be read: No such file"):
        cfg.load(["--config-file", str(tmp_path / "missing.yaml")], {})


def test_bad_env_names_the_variable():
    with pytest.raises(
        cfg.ConfigError, match=r"FAIL_ON_INIT_ERROR: 'maybe' is not valid: expected true or false"
    ):
        cfg.load([], {"FAIL_ON_INIT_ERROR": "maybe"})
    with pytest.raises(cfg.ConfigError, match=r"DP_DISABLE_HEALTHCHECKS: 'x1' is not an XID"):
        cfg.load([], {"DP_DISABLE_HEALTHCHECKS": "x1"})


def test_relative_plugin_dir_is_refused():
    with pytest.raises(
        cfg.ConfigError, match=r"device-plugin-path: 'plugins' is not valid; expected an absolute path"
    ):
        cfg.load(["--device-plugin-path", "plugins"], {})


def test_a_resource_shared_twice_is_refused(tmp_path):
    path = write(
        tmp_path,
        "sharing:\n  timeSlicing:\n    resources:\n"
        "      - {name: nvidia.com/gpu, replicas: 2}\n      - {name: nvidia.com/gpu, replicas: 3}\n",
    )
    with pytest.raises(cfg.ConfigError, match=r"'nvidia\.com/gpu' is listed twice"):
        cfg.load(["--config-file", path], {})


def test_mps_is_refused_by_name(tmp_path):
    # NVIDIA's schema has sharing.mps (the labels describe it for NVIDIA's plugin); this
    # daemon serves time-slicing only and says so instead of ignoring it.
    path = write(tmp_path, "sharing:\n  mps:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 2}\n")
    with pytest.raises(cfg.ConfigError, match=r"sharing\.mps: the gpuops device plugin does not serve MPS"):
        cfg.load(["--config-file", path], {})


DRA_FILE = """\
version: v1
frontEnd: dra
dra:
  nodeName: gpu-node-1
  kubeconfig: /etc/gpuops/kubeconfig
  kubeletRegistryDir: /k/plugins_registry
  kubeletPluginsDir: /k/plugins
  cdiDir: /run/cdi
  toolkitSpec: /run/cdi/nvidia-gpus.yaml
  nvidiaSmi: /run/nvidia/driver/usr/bin/nvidia-smi
  resyncSeconds: 12
"""


def test_the_device_plugin_is_the_default_front_end_and_dra_defaults_are_the_kubelets():
    config = cfg.load([], {})
    assert config.front_end == "devicePlugin"
    assert (config.dra_node_name, config.dra_kubeconfig) == ("", "/etc/kubernetes/kubelet.conf")
    assert (config.dra_registry_dir, config.dra_plugins_dir) == (
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
    )
    assert (config.dra_cdi_dir, config.dra_toolkit_spec) == ("/var/run/cdi", "/var/run/cdi/nvidia.yaml")
    assert config.dra_nvidia_smi == "nvidia-smi"
    assert config.dra_resync_seconds == 30.0


def test_the_dra_section_is_read(tmp_path):
    config = cfg.load(["--config-file", write(tmp_path, DRA_FILE)], {})
    assert config.front_end == "dra"
    assert config.dra_node_name == "gpu-node-1"
    assert config.dra_kubeconfig == "/etc/gpuops/kubeconfig"
    assert (config.dra_registry_dir, config.dra_plugins_dir) == ("/k/plugins_registry", "/k/plugins")
    assert (config.dra_cdi_dir, config.dra_toolkit_spec) == ("/run/cdi", "/run/cdi/nvidia-gpus.yaml")
    assert config.dra_nvidia_smi == "/run/nvidia/driver/usr/bin/nvidia-smi"
    assert config.dra_resync_seconds == 12.0


@pytest.mark.parametrize("value", ["", "bin/nvidia-smi"])
def test_nvidia_smi_is_an_absolute_path_or_a_command_name(tmp_path, value):
    path = write(tmp_path, DRA_FILE.replace("/run/nvidia/driver/usr/bin/nvidia-smi", repr(value)))
    with pytest.raises(cfg.ConfigError) as refused:
        cfg.load(["--config-file", path], {})
    assert str(refused.value) == (
        f"dra.nvidiaSmi: {value!r} is not valid; expected an absolute path or a command name"
        " looked up on PATH (nvidia-smi)"
    )


def test_dra_flags_beat_env_beat_the_file(tmp_path):
    path = write(tmp_path, DRA_FILE)
    env = {
        "NODE_NAME": "from-env",
        "GPUOPS_KUBECONFIG": "/env/kubeconfig",
        "GPUOPS_FRONT_END": "devicePlugin",
    }
    config = cfg.load(["--config-file", path], env)
    assert (config.front_end, config.dra_node_name, config.dra_kubeconfig) == (
        "devicePlugin",
        "from-env",
        "/env/kubeconfig",
    )
    config = cfg.load(
        ["--config-file", path, "--front-end", "dra", "--node-name", "flag", "--cdi-root", "/flag/cdi"], env
    )
    assert (config.front_end, config.dra_node_name, config.dra_cdi_dir) == ("dra", "flag", "/flag/cdi")
    with pytest.raises(
        cfg.ConfigError, match=r"dra\.kubeletPluginsDir: 'rel' is not valid; expected an absolute path"
    ):
        cfg.load(["--kubelet-plugins-path", "rel"], {})


def test_replicas_of_one_are_no_sharing_and_pass_with_dra(tmp_path):
    text = (
        "frontEnd: dra\nsharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 1}"
    )
    assert cfg.load(["--config-file", write(tmp_path, text)], {}).front_end == "dra"
