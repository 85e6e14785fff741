// Copyright (c) gpuops.k8s contributors
// GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
// SPDX-License-Identifier: GPL-3.0-or-later

package main

// The YAML profile schema of NVIDIA's mock NVML (k8s-test-infra pkg/gpu/mocknvml), as
// lab/profiles uses it. Unknown keys are ignored, as upstream's loader does.

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

type document struct {
	Version        any              `yaml:"version"`
	System         systemConfig     `yaml:"system"`
	DeviceDefaults map[string]any   `yaml:"device_defaults"`
	Devices        []map[string]any `yaml:"devices"`
	NVLink         nvlinkConfig     `yaml:"nvlink"`
	PCIeTopology   pcieTopology     `yaml:"pcie_topology"`

	exactCount bool // the built-in node: len(Devices) even when 0
}

type systemConfig struct {
	DriverVersion    string `yaml:"driver_version"`
	NVMLVersion      string `yaml:"nvml_version"`
	CUDAVersion      string `yaml:"cuda_version"`
	CUDAVersionMajor int    `yaml:"cuda_version_major"`
	CUDAVersionMinor int    `yaml:"cuda_version_minor"`
	NumDevices       int    `yaml:"num_devices"`
}

type deviceConfig struct {
	Index             *int   `yaml:"index"`
	UUID              string `yaml:"uuid"`
	Name              string `yaml:"name"`
	Serial            string `yaml:"serial"`
	MinorNumber       *int   `yaml:"minor_number"`
	Brand             string `yaml:"brand"`
	Architecture      string `yaml:"architecture"`
	ComputeCapability struct {
		Major int `yaml:"major"`
		Minor int `yaml:"minor"`
	} `yaml:"compute_capability"`
	Memory struct {
		TotalBytes    uint64  `yaml:"total_bytes"`
		ReservedBytes uint64  `yaml:"reserved_bytes"`
		FreeBytes     *uint64 `yaml:"free_bytes"`
		UsedBytes     uint64  `yaml:"used_bytes"`
	} `yaml:"memory"`
	PCI struct {
		BusID       string `yaml:"bus_id"`
		DeviceID    uint32 `yaml:"device_id"`
		SubsystemID uint32 `yaml:"subsystem_id"`
	} `yaml:"pci"`
	PCIe struct {
		MaxLinkGen       uint32 `yaml:"max_link_gen"`
		CurrentLinkGen   uint32 `yaml:"current_link_gen"`
		MaxLinkWidth     uint32 `yaml:"max_link_width"`
		CurrentLinkWidth uint32 `yaml:"current_link_width"`
	} `yaml:"pcie"`
	PersistenceMode flag           `yaml:"persistence_mode"`
	ComputeMode     string         `yaml:"compute_mode"`
	NumaNode        *int           `yaml:"numa_node"`
	MIG             *migConfig     `yaml:"mig"`
	Failure         *failureConfig `yaml:"failure"`
}

type migConfig struct {
	ModeCurrent       flag          `yaml:"mode_current"`
	ModePending       flag          `yaml:"mode_pending"`
	MaxGpuInstances   int           `yaml:"max_gpu_instances"`
	SupportedProfiles []migProfile  `yaml:"supported_profiles"`
	Instances         []migInstance `yaml:"instances"`     // explicit layout
	GpuInstances      []migInstance `yaml:"gpu_instances"` // layout by count
}

type migProfile struct {
	Name            string `yaml:"name"`
	NVMLProfile     string `yaml:"nvml_profile"`
	ProfileID       int    `yaml:"profile_id"`
	Instances       int    `yaml:"instances"`
	MemoryMB        uint64 `yaml:"memory_mb"`
	Multiprocessors uint32 `yaml:"multiprocessors"`
	CopyEngines     uint32 `yaml:"copy_engines"`
	Decoders        uint32 `yaml:"decoders"`
	Encoders        uint32 `yaml:"encoders"`
	JPEG            uint32 `yaml:"jpeg"`
	OFA             uint32 `yaml:"ofa"`
	Placements      []struct {
		Start int `yaml:"start"`
		Size  int `yaml:"size"`
	} `yaml:"placements"`
}

type migInstance struct {
	ID             *int   `yaml:"id"`
	Profile        string `yaml:"profile"`
	PlacementStart *int   `yaml:"placement_start"`
	Count          *int   `yaml:"count"`
}

type failureConfig struct {
	Mode        string    `yaml:"mode"`
	AfterCalls  int       `yaml:"after_calls"`
	Probability *float64  `yaml:"probability"`
	XID         xidConfig `yaml:"xid"`
}

// xidConfig reads `xid: {code: 79}` and the shorthand `xid: 79`.
type xidConfig struct {
	Code uint64 `yaml:"code"`
}

func (x *xidConfig) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode {
		return node.Decode(&x.Code)
	}
	type plain xidConfig
	return node.Decode((*plain)(x))
}

type nvlinkConfig struct {
	Version              int `yaml:"version"`
	LinksPerGPU          int `yaml:"links_per_gpu"`
	BandwidthPerLinkMbps int `yaml:"bandwidth_per_link_mbps"`
	Switches             []struct {
		BDF      string `yaml:"bdf"`
		UUID     string `yaml:"uuid"`
		DeviceID uint32 `yaml:"device_id"`
	} `yaml:"switches"`
}

type pcieTopology struct {
	RootComplexes []struct {
		ID       string   `yaml:"id"`
		NumaNode *int     `yaml:"numa_node"`
		Devices  []string `yaml:"devices"`
	} `yaml:"root_complexes"`
}

// flag is an on/off setting written as a bool or as enabled/disabled.
type flag struct {
	set, on bool
}

func (f *flag) UnmarshalYAML(node *yaml.Node) error {
	switch strings.ToLower(strings.TrimSpace(node.Value)) {
	case "enabled", "enable", "on", "true", "yes", "1":
		*f = flag{set: true, on: true}
	case "disabled", "disable", "off", "false", "no", "0":
		*f = flag{set: true, on: false}
	default:
		return fmt.Errorf("line %d: %q is not enabled/disabled", node.Line, node.Value)
	}
	return nil
}

// configError is a profile the stand-in refuses; nvmlInit fails with its message.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func refuse(format string, args ...any) error {
	return &configError{fmt.Sprintf(format, args...)}
}

// loadDocument reads MOCK_NVML_CONFIG (path) and its MIG table.
func loadDocument(path, migTablePath string) (*document, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, refuse("cannot read MOCK_NVML_CONFIG %s: %v", path, err)
	}
	var doc document
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, refuse("%s is not a valid profile: %v", path, err)
	}
	if doc.Version == nil || fmt.Sprint(doc.Version) == "" {
		return nil, refuse("%s has no top-level `version` (write version: \"1.0\")", path)
	}
	if strings.TrimSpace(doc.System.DriverVersion) == "" {
		return nil, refuse("%s has no system.driver_version", path)
	}

	tablePath, explicit := migTablePath, migTablePath != ""
	if !explicit {
		tablePath = strings.TrimSuffix(strings.TrimSuffix(path, ".yaml"), ".yml") + ".mig.yaml"
	}
	if err := attachMigTable(&doc, tablePath, explicit); err != nil {
		return nil, err
	}
	return &doc, nil
}

// attachMigTable puts a sibling <name>.mig.yaml (or MOCK_MIG_PROFILES_CONFIG) under
// device_defaults.mig.supported_profiles, unless the profile has its table inline.
func attachMigTable(doc *document, tablePath string, explicit bool) error {
	raw, err := os.ReadFile(tablePath)
	if err != nil {
		if explicit {
			return refuse("cannot read MOCK_MIG_PROFILES_CONFIG %s: %v", tablePath, err)
		}
		return nil // no sibling table: the board is not MIG-capable
	}
	var table map[string]any
	if err := yaml.Unmarshal(raw, &table); err != nil {
		return refuse("%s is not a valid MIG profile table: %v", tablePath, err)
	}
	rows, ok := table["supported_profiles"].([]any)
	if !ok || len(rows) == 0 {
		return refuse("%s has no supported_profiles list", tablePath)
	}
	if doc.DeviceDefaults == nil {
		doc.DeviceDefaults = map[string]any{}
	}
	mig, _ := doc.DeviceDefaults["mig"].(map[string]any)
	if mig == nil {
		mig = map[string]any{}
		doc.DeviceDefaults["mig"] = mig
	}
	if _, inline := mig["supported_profiles"]; !inline {
		mig["supported_profiles"] = rows
	}
	return nil
}

// mergeMaps returns base overlaid with over: nested mappings merge, anything else in
// over replaces what base has.
func mergeMaps(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for key, value := range base {
		out[key] = value
	}
	for key, value := range over {
		if sub, ok := value.(map[string]any); ok {
			if baseSub, ok := out[key].(map[string]any); ok {
				out[key] = mergeMaps(baseSub, sub)
				continue
			}
		}
		out[key] = value
	}
	return out
}

// defaultUUID is the UUID of a device the profile does not list; its last four hex
// digits are 0, where MIG UUIDs splice in the instance ids.
func defaultUUID(index int) string {
	return fmt.Sprintf("GPU-6d6f636b-0000-4000-8000-%08x0000", index+1)
}

// deviceConfigs merges device_defaults under every device and decodes the result.
// The count is the length of devices (8 when empty), or system.num_devices when > 0;
// devices beyond the listed ones are built from the defaults alone.
func deviceConfigs(doc *document) ([]deviceConfig, error) {
	count := len(doc.Devices)
	if count == 0 && !doc.exactCount {
		count = 8
	}
	if doc.System.NumDevices > 0 {
		count = doc.System.NumDevices
	}
	configs := make([]deviceConfig, 0, count)
	for pos := 0; pos < count; pos++ {
		entry := map[string]any{}
		if pos < len(doc.Devices) {
			entry = doc.Devices[pos]
		}
		merged := mergeMaps(doc.DeviceDefaults, entry)
		text, err := yaml.Marshal(merged)
		if err != nil {
			return nil, refuse("device %d: %v", pos, err)
		}
		var cfg deviceConfig
		if err := yaml.Unmarshal(text, &cfg); err != nil {
			return nil, refuse("device %d: %v", pos, err)
		}
		if cfg.Index == nil {
			index := pos
			cfg.Index = &index
		}
		configs = append(configs, cfg)
	}
	sort.SliceStable(configs, func(a, b int) bool { return *configs[a].Index < *configs[b].Index })
	for pos := range configs {
		cfg := &configs[pos]
		if *cfg.Index != pos {
			return nil, refuse("device indexes must be 0..%d without gaps (found %d at position %d)",
				len(configs)-1, *cfg.Index, pos)
		}
		if cfg.UUID == "" {
			cfg.UUID = defaultUUID(pos)
		}
		if cfg.PCI.BusID == "" {
			cfg.PCI.BusID = fmt.Sprintf("0000:%02X:00.0", pos)
		}
		if cfg.MinorNumber == nil {
			minor := pos
			cfg.MinorNumber = &minor
		}
		if cfg.Name == "" {
			cfg.Name = "NVIDIA A100-SXM4-40GB"
		}
	}
	return configs, checkUnique(configs)
}

var uuidForm = regexp.MustCompile(`^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func checkUnique(configs []deviceConfig) error {
	uuids, stems, buses := map[string]int{}, map[string]int{}, map[string]int{}
	for _, cfg := range configs {
		index := *cfg.Index
		if !uuidForm.MatchString(cfg.UUID) {
			return refuse("device %d: uuid %q is not GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", index, cfg.UUID)
		}
		key := strings.ToLower(cfg.UUID)
		if other, dup := uuids[key]; dup {
			return refuse("devices %d and %d have the same uuid %s", other, index, cfg.UUID)
		}
		uuids[key] = index
		// MIG UUIDs replace the last four hex digits with the GPU/compute instance ids.
		stem := key[:len(key)-4]
		if other, dup := stems[stem]; dup {
			return refuse("devices %d and %d have uuids that differ only in their last four digits, "+
				"where MIG instance ids are spliced in", other, index)
		}
		stems[stem] = index
		bus, err := parseBusID(cfg.PCI.BusID)
		if err != nil {
			return refuse("device %d: %v", index, err)
		}
		if other, dup := buses[bus.key()]; dup {
			return refuse("devices %d and %d have the same pci.bus_id %s", other, index, cfg.PCI.BusID)
		}
		buses[bus.key()] = index
	}
	return nil
}

// busID is a PCI address.
type busID struct {
	domain, bus, device, function uint32
}

var busIDForm = regexp.MustCompile(`^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$`)

func parseBusID(text string) (busID, error) {
	m := busIDForm.FindStringSubmatch(strings.TrimSpace(text))
	if m == nil {
		return busID{}, fmt.Errorf("%q is not a PCI bus id (DDDD:BB:DD.F)", text)
	}
	hex := func(s string) uint32 {
		if s == "" {
			return 0
		}
		v, _ := strconv.ParseUint(s, 16, 32)
		return uint32(v)
	}
	return busID{hex(m[1]), hex(m[2]), hex(m[3]), hex(m[4])}, nil
}

// key is the sysfs form, the one lookups compare.
func (b busID) key() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", b.domain, b.bus, b.device, b.function)
}

// nvml is NVML's nvmlPciInfo_t.busId form; legacy its busIdLegacy form.
func (b busID) nvml() string {
	return fmt.Sprintf("%08X:%02X:%02X.%X", b.domain, b.bus, b.device, b.function)
}

func (b busID) legacy() string {
	return fmt.Sprintf("%04X:%02X:%02X.%X", b.domain, b.bus, b.device, b.function)
}
