// Copyright (c) gpuops.k8s contributors
// GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
// SPDX-License-Identifier: GPL-3.0-or-later

package main

// The simulated node: GPUs, their MIG devices, failure state and event sets.

/*
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const mib = 1024 * 1024

// Event types this stand-in reports as supported, and the one it delivers.
const supportedEvents = uint64(nvml.EventTypeXidCriticalError |
	nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError)

type gpu struct {
	index  int
	cfg    deviceConfig
	bus    busID
	handle unsafe.Pointer

	migCapable  bool
	migEnabled  bool
	migPending  bool
	maxMig      int
	migs        []*migDevice // by slot
	rootComplex string
	numa        *int

	calls          int
	tripped        bool
	failed         bool // failure block tripped a lost / fallen_off_bus mode
	eccUncorrected uint64
	undelivered    []uint64 // XID codes no event set has taken yet
}

type migDevice struct {
	parent  *gpu
	slot    int
	gi, ci  int
	start   int
	profile *migProfile
	slices  uint32
	uuid    string
	handle  unsafe.Pointer
}

type event struct {
	dev        *gpu
	kind, data uint64
}

type eventSet struct {
	handle unsafe.Pointer
	masks  map[*gpu]uint64
	queue  []event
}

type node struct {
	system   systemConfig
	gpus     []*gpu
	nvlink   nvlinkConfig
	numaOfRC map[string]*int
}

var (
	mu       sync.Mutex
	refcount int
	state    *node
	handles  = map[unsafe.Pointer]any{} // *gpu, *migDevice or *eventSet
)

func warn(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mock NVML (gpuops stand-in): "+format+"\n", args...)
}

// newHandle is a C allocation: NVML handles are opaque pointers that C code keeps, so
// they must not point into Go memory.
func newHandle(owner any) unsafe.Pointer {
	p := C.calloc(1, 16)
	handles[p] = owner
	return p
}

// load builds the node from the environment (called by the first nvmlInit).
func load() (*node, error) {
	path := os.Getenv("MOCK_NVML_CONFIG")
	var doc *document
	if path == "" {
		doc = defaultDocument()
	} else {
		var err error
		if doc, err = loadDocument(path, os.Getenv("MOCK_MIG_PROFILES_CONFIG")); err != nil {
			return nil, err
		}
	}
	configs, err := deviceConfigs(doc)
	if err != nil {
		return nil, err
	}
	n := &node{
		system:   doc.System,
		nvlink:   doc.NVLink,
		numaOfRC: map[string]*int{},
	}
	rcOfBus := map[string]string{}
	for _, rc := range doc.PCIeTopology.RootComplexes {
		n.numaOfRC[rc.ID] = rc.NumaNode
		for _, dev := range rc.Devices {
			if bus, err := parseBusID(dev); err == nil {
				rcOfBus[bus.key()] = rc.ID
			}
		}
	}
	for _, cfg := range configs {
		bus, _ := parseBusID(cfg.PCI.BusID) // checked by deviceConfigs
		g := &gpu{index: *cfg.Index, cfg: cfg, bus: bus, rootComplex: rcOfBus[bus.key()]}
		g.numa = cfg.NumaNode
		if g.numa == nil && g.rootComplex != "" {
			g.numa = n.numaOfRC[g.rootComplex]
		}
		if f := cfg.Failure; f != nil {
			switch f.Mode {
			case "lost", "fallen_off_bus", "ecc_uncorrectable":
			default:
				warn("device %d: failure mode %q is not one this stand-in knows (lost, "+
					"fallen_off_bus, ecc_uncorrectable); ignored", g.index, f.Mode)
				g.cfg.Failure = nil
			}
		}
		if err := g.buildMig(); err != nil {
			return nil, err
		}
		n.gpus = append(n.gpus, g)
	}
	for _, g := range n.gpus {
		g.handle = newHandle(g)
		for _, m := range g.migs {
			m.handle = newHandle(m)
		}
	}
	return n, nil
}

// defaultDocument is the node without MOCK_NVML_CONFIG, modelled on go-nvml's dgxa100
// mock server (A100-SXM4-40GB, driver 550.54.15, CUDA 12.4; fixed UUIDs where dgxa100
// draws random ones): MOCK_NVML_NUM_DEVICES GPUs, 8 by default, 0 for a node without one.
func defaultDocument() *document {
	count := 8
	if text := os.Getenv("MOCK_NVML_NUM_DEVICES"); text != "" {
		if v, err := strconv.Atoi(text); err == nil && v >= 0 {
			count = v
		} else {
			warn("MOCK_NVML_NUM_DEVICES=%q is not a count; using 8", text)
		}
	}
	doc := &document{
		Version: "1.0",
		System: systemConfig{
			DriverVersion: "550.54.15", NVMLVersion: "12.550.54.15",
			CUDAVersionMajor: 12, CUDAVersionMinor: 4,
		},
		DeviceDefaults: map[string]any{
			"name":               "Mock NVIDIA A100-SXM4-40GB",
			"brand":              "nvidia",
			"architecture":       "ampere",
			"compute_capability": map[string]any{"major": 8, "minor": 0},
			"memory":             map[string]any{"total_bytes": 42949672960},
		},
	}
	doc.Devices = make([]map[string]any, count)
	for i := range doc.Devices {
		doc.Devices[i] = map[string]any{"index": i}
	}
	doc.exactCount = true
	if table := os.Getenv("MOCK_MIG_PROFILES_CONFIG"); table != "" {
		if err := attachMigTable(doc, table, true); err != nil {
			warn("%v", err)
		}
	}
	return doc
}

var sliceCount = regexp.MustCompile(`^(\d+)(?:g\.|_SLICE)`)

func (p *migProfile) slices() uint32 {
	for _, text := range []string{p.Name, p.NVMLProfile} {
		if m := sliceCount.FindStringSubmatch(text); m != nil {
			v, _ := strconv.Atoi(m[1])
			return uint32(v)
		}
	}
	return 1
}

// buildMig lays out the MIG devices: explicit instances (id, profile, placement_start)
// first, then gpu_instances by count, each at its profile's first free placement.
func (g *gpu) buildMig() error {
	mig := g.cfg.MIG
	if mig == nil || len(mig.SupportedProfiles) == 0 {
		return nil // no profile table: not MIG-capable
	}
	g.migCapable = true
	g.migEnabled = mig.ModeCurrent.on
	g.migPending = mig.ModePending.on
	if !mig.ModePending.set {
		g.migPending = g.migEnabled
	}
	g.maxMig = mig.MaxGpuInstances
	if g.maxMig <= 0 {
		g.maxMig = 7
	}
	if !g.migEnabled {
		return nil
	}
	profiles := map[string]*migProfile{}
	for i := range mig.SupportedProfiles {
		profiles[mig.SupportedProfiles[i].Name] = &mig.SupportedProfiles[i]
	}
	used := map[int]bool{}    // memory slices taken
	usedIDs := map[int]bool{} // GPU instance ids taken
	place := func(p *migProfile, start *int, id *int) error {
		size := -1
		for _, pl := range p.Placements {
			if start == nil || pl.Start == *start {
				free := true
				for s := pl.Start; s < pl.Start+pl.Size; s++ {
					free = free && !used[s]
				}
				if free {
					size = pl.Size
					s := pl.Start
					start = &s
					break
				}
				if start != nil {
					return refuse("device %d: MIG %s at placement %d overlaps another instance",
						g.index, p.Name, *start)
				}
			}
		}
		if size < 0 {
			if start != nil && len(p.Placements) > 0 {
				return refuse("device %d: MIG %s has no placement starting at %d", g.index, p.Name, *start)
			}
			if len(p.Placements) > 0 {
				return refuse("device %d: no free placement left for another MIG %s", g.index, p.Name)
			}
			return refuse("device %d: MIG profile %s lists no placements", g.index, p.Name)
		}
		for s := *start; s < *start+size; s++ {
			used[s] = true
		}
		gi := 0
		if id != nil {
			gi = *id
			if usedIDs[gi] {
				return refuse("device %d: GPU instance id %d used twice", g.index, gi)
			}
		} else {
			for gi = 1; usedIDs[gi]; gi++ {
			}
		}
		usedIDs[gi] = true
		g.migs = append(g.migs, &migDevice{parent: g, gi: gi, ci: 0, start: *start, profile: p, slices: p.slices()})
		return nil
	}
	lookup := func(name string) (*migProfile, error) {
		if p := profiles[name]; p != nil {
			return p, nil
		}
		return nil, refuse("device %d: MIG profile %q is not in the board's supported_profiles", g.index, name)
	}
	for _, inst := range mig.Instances {
		p, err := lookup(inst.Profile)
		if err != nil {
			return err
		}
		if err := place(p, inst.PlacementStart, inst.ID); err != nil {
			return err
		}
	}
	for _, inst := range mig.GpuInstances {
		p, err := lookup(inst.Profile)
		if err != nil {
			return err
		}
		count := 1
		if inst.Count != nil {
			count = *inst.Count
		}
		for i := 0; i < count; i++ {
			if err := place(p, inst.PlacementStart, inst.ID); err != nil {
				return err
			}
		}
	}
	if len(g.migs) > g.maxMig {
		return refuse("device %d: %d MIG devices, more than max_gpu_instances %d", g.index, len(g.migs), g.maxMig)
	}
	sort.SliceStable(g.migs, func(a, b int) bool { return g.migs[a].start < g.migs[b].start })
	for slot, m := range g.migs {
		m.slot = slot
		uuid := strings.TrimPrefix(g.cfg.UUID, "GPU-")
		m.uuid = fmt.Sprintf("MIG-%s%02x%02x", uuid[:len(uuid)-4], m.gi, m.ci)
	}
	return nil
}

// --- failures ---------------------------------------------------------------------------

// guard runs before every call on a device: it counts the call towards the device's
// failure block and says whether the GPU answers.
func (n *node) guard(g *gpu) nvml.Return {
	if f := g.cfg.Failure; f != nil && !g.tripped {
		g.calls++
		if g.calls > f.AfterCalls && (f.Probability == nil || rand.Float64() < *f.Probability) {
			n.trip(g)
		}
	}
	if g.failed {
		return nvml.ERROR_GPU_IS_LOST
	}
	return nvml.SUCCESS
}

func (n *node) trip(g *gpu) {
	f := g.cfg.Failure
	g.tripped = true
	code := f.XID.Code
	switch f.Mode {
	case "lost", "fallen_off_bus":
		g.failed = true
	case "ecc_uncorrectable":
		g.eccUncorrected++
		if code == 0 {
			code = 48 // double-bit ECC error
		}
	}
	if code != 0 {
		n.deliver(g, code, true)
	}
}

// setsFor lists the event sets that registered g for XID critical errors.
func setsFor(g *gpu) []*eventSet {
	var sets []*eventSet
	for _, owner := range handles {
		if s, ok := owner.(*eventSet); ok && s.masks[g]&uint64(nvml.EventTypeXidCriticalError) != 0 {
			sets = append(sets, s)
		}
	}
	return sets
}

// deliver queues one XID event for g in every set that registered it; keep holds it for
// the first set that registers later when none has yet.
func (n *node) deliver(g *gpu, code uint64, keep bool) bool {
	sets := setsFor(g)
	if len(sets) == 0 {
		if keep {
			g.undelivered = append(g.undelivered, code)
		}
		return false
	}
	for _, s := range sets {
		s.queue = append(s.queue, event{dev: g, kind: uint64(nvml.EventTypeXidCriticalError), data: code})
	}
	return true
}
