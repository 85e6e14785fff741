// Copyright (c) gpuops.k8s contributors
// GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
// SPDX-License-Identifier: GPL-3.0-or-later

package main

// The NVML C API, exported with the prototypes of go-nvml's nvml.h. Functions whose
// nvml.h prototype has a const parameter are defined in shim.c (cgo cannot export
// const) and land here under a gpuops* name. Every other nvml.h function is a stub in
// the generated stubs_gen.c that answers NVML_ERROR_NOT_SUPPORTED.

/*
#cgo CFLAGS: -DNVML_NO_UNVERSIONED_FUNC_DEFS=1 -I${SRCDIR}/include
#include <stdlib.h>
#include "nvml.h"
*/
import "C"

import (
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// How often nvmlEventSetWait looks for new events.
const waitSlice = 5 * time.Millisecond

func rc(r nvml.Return) C.nvmlReturn_t { return C.nvmlReturn_t(r) }

// deviceHandle wraps a handle the way go-nvml's nvml.h declares nvmlDevice_t: a struct
// holding the opaque pointer (passed like the pointer itself in the C ABI).
func deviceHandle(p unsafe.Pointer) C.nvmlDevice_t {
	return C.nvmlDevice_t{handle: (*C.struct_nvmlDevice_st)(p)}
}

func initialized() bool { return refcount > 0 && state != nil }

// resolve looks up a handle for a call on a device: the GPU (for a MIG device, its
// parent) and the MIG device or nil. The call counts as a guarded call on the GPU.
func resolve(h C.nvmlDevice_t) (*gpu, *migDevice, nvml.Return) {
	if !initialized() {
		return nil, nil, nvml.ERROR_UNINITIALIZED
	}
	var g *gpu
	var m *migDevice
	switch owner := handles[unsafe.Pointer(h.handle)].(type) {
	case *gpu:
		g = owner
	case *migDevice:
		g, m = owner.parent, owner
	default:
		return nil, nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if r := state.guard(g); r != nvml.SUCCESS {
		return nil, nil, r
	}
	return g, m, nvml.SUCCESS
}

// physical is resolve() for calls that take only a full GPU.
func physical(h C.nvmlDevice_t) (*gpu, nvml.Return) {
	g, m, r := resolve(h)
	if r == nvml.SUCCESS && m != nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return g, r
}

func putString(dst *C.char, length C.uint, s string) nvml.Return {
	if dst == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if uint64(len(s))+1 > uint64(length) {
		return nvml.ERROR_INSUFFICIENT_SIZE
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(dst)), int(length))
	copy(buf, s)
	buf[len(s)] = 0
	return nvml.SUCCESS
}

func putUint(dst *C.uint, v uint32) nvml.Return {
	if dst == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	*dst = C.uint(v)
	return nvml.SUCCESS
}

// --- init, system -----------------------------------------------------------------------

func initNVML() nvml.Return {
	mu.Lock()
	defer mu.Unlock()
	if state == nil {
		n, err := load()
		if err != nil {
			warn("nvmlInit fails: %v", err)
			return nvml.ERROR_UNKNOWN
		}
		state = n
	}
	refcount++
	return nvml.SUCCESS
}

//export nvmlInit
func nvmlInit() C.nvmlReturn_t { return rc(initNVML()) }

//export nvmlInit_v2
func nvmlInit_v2() C.nvmlReturn_t { return rc(initNVML()) }

//export nvmlInitWithFlags
func nvmlInitWithFlags(flags C.uint) C.nvmlReturn_t { return rc(initNVML()) }

//export nvmlShutdown
func nvmlShutdown() C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if refcount == 0 {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	refcount--
	return rc(nvml.SUCCESS)
}

func systemString(version *C.char, length C.uint, value func(systemConfig) string) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	return rc(putString(version, length, value(state.system)))
}

//export nvmlSystemGetDriverVersion
func nvmlSystemGetDriverVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	return systemString(version, length, func(s systemConfig) string { return s.DriverVersion })
}

//export nvmlSystemGetNVMLVersion
func nvmlSystemGetNVMLVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	return systemString(version, length, func(s systemConfig) string {
		if s.NVMLVersion != "" {
			return s.NVMLVersion
		}
		major, _ := cudaVersion(s)
		return strconv.Itoa(major) + "." + s.DriverVersion
	})
}

// cudaVersion is system.cuda_version_major/minor, else system.cuda_version "12.4".
func cudaVersion(s systemConfig) (int, int) {
	if s.CUDAVersionMajor > 0 {
		return s.CUDAVersionMajor, s.CUDAVersionMinor
	}
	major, minor, _ := strings.Cut(s.CUDAVersion, ".")
	ma, _ := strconv.Atoi(major)
	mi, _ := strconv.Atoi(minor)
	if ma == 0 {
		return 12, 4
	}
	return ma, mi
}

func cudaDriverVersion(out *C.int) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	if out == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	major, minor := cudaVersion(state.system)
	*out = C.int(major*1000 + minor*10)
	return rc(nvml.SUCCESS)
}

//export nvmlSystemGetCudaDriverVersion
func nvmlSystemGetCudaDriverVersion(version *C.int) C.nvmlReturn_t { return cudaDriverVersion(version) }

//export nvmlSystemGetCudaDriverVersion_v2
func nvmlSystemGetCudaDriverVersion_v2(version *C.int) C.nvmlReturn_t {
	return cudaDriverVersion(version)
}

// --- enumeration ------------------------------------------------------------------------

func deviceCount(count *C.uint) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	return rc(putUint(count, uint32(len(state.gpus))))
}

//export nvmlDeviceGetCount
func nvmlDeviceGetCount(count *C.uint) C.nvmlReturn_t { return deviceCount(count) }

//export nvmlDeviceGetCount_v2
func nvmlDeviceGetCount_v2(count *C.uint) C.nvmlReturn_t { return deviceCount(count) }

// handleOf answers a lookup: the handle, or the device's error (a lost GPU stays lost).
func handleOf(g *gpu, m *migDevice, out *C.nvmlDevice_t) C.nvmlReturn_t {
	if out == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	if r := state.guard(g); r != nvml.SUCCESS {
		return rc(r)
	}
	if m != nil {
		*out = deviceHandle(m.handle)
	} else {
		*out = deviceHandle(g.handle)
	}
	return rc(nvml.SUCCESS)
}

func handleByIndex(index C.uint, out *C.nvmlDevice_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	if int(index) >= len(state.gpus) {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	return handleOf(state.gpus[index], nil, out)
}

//export nvmlDeviceGetHandleByIndex
func nvmlDeviceGetHandleByIndex(index C.uint, device *C.nvmlDevice_t) C.nvmlReturn_t {
	return handleByIndex(index, device)
}

//export nvmlDeviceGetHandleByIndex_v2
func nvmlDeviceGetHandleByIndex_v2(index C.uint, device *C.nvmlDevice_t) C.nvmlReturn_t {
	return handleByIndex(index, device)
}

// gpuopsDeviceGetHandleByUUID backs nvmlDeviceGetHandleByUUID (shim.c): GPU and MIG UUIDs.
//
//export gpuopsDeviceGetHandleByUUID
func gpuopsDeviceGetHandleByUUID(uuid *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	if uuid == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	want := strings.ToLower(C.GoString(uuid))
	for _, g := range state.gpus {
		if strings.ToLower(g.cfg.UUID) == want {
			return handleOf(g, nil, out)
		}
		for _, m := range g.migs {
			if strings.ToLower(m.uuid) == want {
				return handleOf(g, m, out)
			}
		}
	}
	return rc(nvml.ERROR_NOT_FOUND)
}

// gpuopsDeviceGetHandleByPciBusId backs nvmlDeviceGetHandleByPciBusId(_v2) (shim.c).
//
//export gpuopsDeviceGetHandleByPciBusId
func gpuopsDeviceGetHandleByPciBusId(pciBusID *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	if pciBusID == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	want, err := parseBusID(C.GoString(pciBusID))
	if err != nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	for _, g := range state.gpus {
		if g.bus.key() == want.key() {
			return handleOf(g, nil, out)
		}
	}
	return rc(nvml.ERROR_NOT_FOUND)
}

// gpuopsDeviceGetHandleBySerial backs nvmlDeviceGetHandleBySerial (shim.c).
//
//export gpuopsDeviceGetHandleBySerial
func gpuopsDeviceGetHandleBySerial(serial *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	if serial == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	want := C.GoString(serial)
	for _, g := range state.gpus {
		if g.cfg.Serial != "" && g.cfg.Serial == want {
			return handleOf(g, nil, out)
		}
	}
	return rc(nvml.ERROR_NOT_FOUND)
}

// --- identity ---------------------------------------------------------------------------

// deviceString answers a string getter; value gets the MIG device or nil.
func deviceString(h C.nvmlDevice_t, out *C.char, length C.uint, value func(*gpu, *migDevice) (string, nvml.Return)) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, m, r := resolve(h)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	s, r := value(g, m)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	return rc(putString(out, length, s))
}

//export nvmlDeviceGetName
func nvmlDeviceGetName(device C.nvmlDevice_t, name *C.char, length C.uint) C.nvmlReturn_t {
	return deviceString(device, name, length, func(g *gpu, m *migDevice) (string, nvml.Return) {
		if m != nil {
			return g.cfg.Name + " MIG " + m.profile.Name, nvml.SUCCESS
		}
		return g.cfg.Name, nvml.SUCCESS
	})
}

//export nvmlDeviceGetUUID
func nvmlDeviceGetUUID(device C.nvmlDevice_t, uuid *C.char, length C.uint) C.nvmlReturn_t {
	return deviceString(device, uuid, length, func(g *gpu, m *migDevice) (string, nvml.Return) {
		if m != nil {
			return m.uuid, nvml.SUCCESS
		}
		return g.cfg.UUID, nvml.SUCCESS
	})
}

//export nvmlDeviceGetSerial
func nvmlDeviceGetSerial(device C.nvmlDevice_t, serial *C.char, length C.uint) C.nvmlReturn_t {
	return deviceString(device, serial, length, func(g *gpu, m *migDevice) (string, nvml.Return) {
		if g.cfg.Serial == "" {
			return "", nvml.ERROR_NOT_SUPPORTED
		}
		return g.cfg.Serial, nvml.SUCCESS
	})
}

// deviceUint answers an unsigned int getter on a full GPU.
func deviceUint(h C.nvmlDevice_t, out *C.uint, value func(*gpu) (uint32, nvml.Return)) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, r := physical(h)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	v, r := value(g)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	return rc(putUint(out, v))
}

func ok(v uint32) (uint32, nvml.Return) { return v, nvml.SUCCESS }

//export nvmlDeviceGetIndex
func nvmlDeviceGetIndex(device C.nvmlDevice_t, index *C.uint) C.nvmlReturn_t {
	return deviceUint(device, index, func(g *gpu) (uint32, nvml.Return) { return ok(uint32(g.index)) })
}

//export nvmlDeviceGetMinorNumber
func nvmlDeviceGetMinorNumber(device C.nvmlDevice_t, minorNumber *C.uint) C.nvmlReturn_t {
	return deviceUint(device, minorNumber, func(g *gpu) (uint32, nvml.Return) {
		return ok(uint32(*g.cfg.MinorNumber))
	})
}

var brands = map[string]nvml.BrandType{
	"":            nvml.BRAND_NVIDIA,
	"nvidia":      nvml.BRAND_NVIDIA,
	"tesla":       nvml.BRAND_TESLA,
	"quadro":      nvml.BRAND_QUADRO,
	"quadro_rtx":  nvml.BRAND_QUADRO_RTX,
	"nvidia_rtx":  nvml.BRAND_NVIDIA_RTX,
	"geforce":     nvml.BRAND_GEFORCE,
	"geforce_rtx": nvml.BRAND_GEFORCE_RTX,
	"titan":       nvml.BRAND_TITAN,
	"titan_rtx":   nvml.BRAND_TITAN_RTX,
	"nvs":         nvml.BRAND_NVS,
	"grid":        nvml.BRAND_GRID,
}

//export nvmlDeviceGetBrand
func nvmlDeviceGetBrand(device C.nvmlDevice_t, brand *C.nvmlBrandType_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, _, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if brand == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	b, known := brands[strings.ToLower(strings.ReplaceAll(g.cfg.Brand, " ", "_"))]
	if !known {
		b = nvml.BRAND_UNKNOWN
	}
	*brand = C.nvmlBrandType_t(b)
	return rc(nvml.SUCCESS)
}

var architectures = map[string]nvml.DeviceArchitecture{
	"kepler":    nvml.DEVICE_ARCH_KEPLER,
	"maxwell":   nvml.DEVICE_ARCH_MAXWELL,
	"pascal":    nvml.DEVICE_ARCH_PASCAL,
	"volta":     nvml.DEVICE_ARCH_VOLTA,
	"turing":    nvml.DEVICE_ARCH_TURING,
	"ampere":    nvml.DEVICE_ARCH_AMPERE,
	"ada":       nvml.DEVICE_ARCH_ADA,
	"hopper":    nvml.DEVICE_ARCH_HOPPER,
	"blackwell": nvml.DEVICE_ARCH_BLACKWELL,
}

//export nvmlDeviceGetArchitecture
func nvmlDeviceGetArchitecture(device C.nvmlDevice_t, arch *C.nvmlDeviceArchitecture_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, _, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if arch == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	a, known := architectures[strings.ToLower(g.cfg.Architecture)]
	if !known {
		a = nvml.DEVICE_ARCH_UNKNOWN
	}
	*arch = C.nvmlDeviceArchitecture_t(a)
	return rc(nvml.SUCCESS)
}

//export nvmlDeviceGetCudaComputeCapability
func nvmlDeviceGetCudaComputeCapability(device C.nvmlDevice_t, major, minor *C.int) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, _, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if major == nil || minor == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*major = C.int(g.cfg.ComputeCapability.Major)
	*minor = C.int(g.cfg.ComputeCapability.Minor)
	return rc(nvml.SUCCESS)
}

//export nvmlDeviceGetPersistenceMode
func nvmlDeviceGetPersistenceMode(device C.nvmlDevice_t, mode *C.nvmlEnableState_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, _, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if mode == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*mode = C.nvmlEnableState_t(nvml.FEATURE_DISABLED)
	if g.cfg.PersistenceMode.on {
		*mode = C.nvmlEnableState_t(nvml.FEATURE_ENABLED)
	}
	return rc(nvml.SUCCESS)
}

var computeModes = map[string]nvml.ComputeMode{
	"":                  nvml.COMPUTEMODE_DEFAULT,
	"default":           nvml.COMPUTEMODE_DEFAULT,
	"exclusive_thread":  nvml.COMPUTEMODE_EXCLUSIVE_THREAD,
	"prohibited":        nvml.COMPUTEMODE_PROHIBITED,
	"exclusive_process": nvml.COMPUTEMODE_EXCLUSIVE_PROCESS,
}

//export nvmlDeviceGetComputeMode
func nvmlDeviceGetComputeMode(device C.nvmlDevice_t, mode *C.nvmlComputeMode_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, _, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if mode == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*mode = C.nvmlComputeMode_t(computeModes[strings.ToLower(g.cfg.ComputeMode)])
	return rc(nvml.SUCCESS)
}

//export nvmlDeviceGetNumaNodeId
func nvmlDeviceGetNumaNodeId(device C.nvmlDevice_t, node *C.uint) C.nvmlReturn_t {
	return deviceUint(device, node, func(g *gpu) (uint32, nvml.Return) {
		if g.numa == nil || *g.numa < 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return ok(uint32(*g.numa))
	})
}

// --- memory, PCI ------------------------------------------------------------------------

// memory is what the device reports: total, reserved, free, used bytes.
func memory(g *gpu, m *migDevice) nvml.Memory_v2 {
	if m != nil {
		total := m.profile.MemoryMB * mib
		return nvml.Memory_v2{Total: total, Free: total}
	}
	mem := g.cfg.Memory
	free := mem.TotalBytes - min(mem.TotalBytes, mem.ReservedBytes+mem.UsedBytes)
	if mem.FreeBytes != nil {
		free = *mem.FreeBytes
	}
	return nvml.Memory_v2{Total: mem.TotalBytes, Reserved: mem.ReservedBytes, Free: free, Used: mem.UsedBytes}
}

//export nvmlDeviceGetMemoryInfo
func nvmlDeviceGetMemoryInfo(device C.nvmlDevice_t, memoryInfo *C.nvmlMemory_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, m, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if memoryInfo == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	mem := memory(g, m)
	*(*nvml.Memory)(unsafe.Pointer(memoryInfo)) = nvml.Memory{Total: mem.Total, Free: mem.Free, Used: mem.Used}
	return rc(nvml.SUCCESS)
}

// memoryV2Version is nvmlMemory_v2 (NVML_STRUCT_VERSION(Memory, 2)).
var memoryV2Version = uint32(unsafe.Sizeof(C.nvmlMemory_v2_t{})) | 2<<24

//export nvmlDeviceGetMemoryInfo_v2
func nvmlDeviceGetMemoryInfo_v2(device C.nvmlDevice_t, memoryInfo *C.nvmlMemory_v2_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, m, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if memoryInfo == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	out := (*nvml.Memory_v2)(unsafe.Pointer(memoryInfo))
	if out.Version != memoryV2Version {
		return rc(nvml.ERROR_ARGUMENT_VERSION_MISMATCH)
	}
	mem := memory(g, m)
	mem.Version = out.Version
	*out = mem
	return rc(nvml.SUCCESS)
}

func putPciInfo(out *C.nvmlPciInfo_t, bus busID, deviceID, subsystemID uint32) nvml.Return {
	if out == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	info := nvml.PciInfo{
		Domain: bus.domain, Bus: bus.bus, Device: bus.device,
		PciDeviceId: deviceID, PciSubSystemId: subsystemID,
	}
	copy(info.BusIdLegacy[:len(info.BusIdLegacy)-1], bus.legacy())
	copy(info.BusId[:len(info.BusId)-1], bus.nvml())
	*(*nvml.PciInfo)(unsafe.Pointer(out)) = info
	return nvml.SUCCESS
}

func pciInfo(h C.nvmlDevice_t, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, _, r := resolve(h)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	return rc(putPciInfo(pci, g.bus, g.cfg.PCI.DeviceID, g.cfg.PCI.SubsystemID))
}

//export nvmlDeviceGetPciInfo_v3
func nvmlDeviceGetPciInfo_v3(device C.nvmlDevice_t, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return pciInfo(device, pci)
}

//export nvmlDeviceGetPciInfo_v2
func nvmlDeviceGetPciInfo_v2(device C.nvmlDevice_t, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return pciInfo(device, pci)
}

//export nvmlDeviceGetCurrPcieLinkGeneration
func nvmlDeviceGetCurrPcieLinkGeneration(device C.nvmlDevice_t, currLinkGen *C.uint) C.nvmlReturn_t {
	return deviceUint(device, currLinkGen, func(g *gpu) (uint32, nvml.Return) { return pcie(g.cfg.PCIe.CurrentLinkGen) })
}

//export nvmlDeviceGetMaxPcieLinkGeneration
func nvmlDeviceGetMaxPcieLinkGeneration(device C.nvmlDevice_t, maxLinkGen *C.uint) C.nvmlReturn_t {
	return deviceUint(device, maxLinkGen, func(g *gpu) (uint32, nvml.Return) { return pcie(g.cfg.PCIe.MaxLinkGen) })
}

//export nvmlDeviceGetCurrPcieLinkWidth
func nvmlDeviceGetCurrPcieLinkWidth(device C.nvmlDevice_t, currLinkWidth *C.uint) C.nvmlReturn_t {
	return deviceUint(device, currLinkWidth, func(g *gpu) (uint32, nvml.Return) { return pcie(g.cfg.PCIe.CurrentLinkWidth) })
}

//export nvmlDeviceGetMaxPcieLinkWidth
func nvmlDeviceGetMaxPcieLinkWidth(device C.nvmlDevice_t, maxLinkWidth *C.uint) C.nvmlReturn_t {
	return deviceUint(device, maxLinkWidth, func(g *gpu) (uint32, nvml.Return) { return pcie(g.cfg.PCIe.MaxLinkWidth) })
}

func pcie(v uint32) (uint32, nvml.Return) {
	if v == 0 {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return v, nvml.SUCCESS
}

// --- topology, NVLink -------------------------------------------------------------------

//export nvmlDeviceGetTopologyCommonAncestor
func nvmlDeviceGetTopologyCommonAncestor(device1, device2 C.nvmlDevice_t, pathInfo *C.nvmlGpuTopologyLevel_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	a, r := physical(device1)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	b, r := physical(device2)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if pathInfo == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	level := nvml.TOPOLOGY_SYSTEM
	switch {
	case a == b:
		level = nvml.TOPOLOGY_INTERNAL
	case a.rootComplex != "" && a.rootComplex == b.rootComplex:
		level = nvml.TOPOLOGY_HOSTBRIDGE
	case a.numa != nil && b.numa != nil && *a.numa == *b.numa:
		level = nvml.TOPOLOGY_NODE
	}
	*pathInfo = C.nvmlGpuTopologyLevel_t(level)
	return rc(nvml.SUCCESS)
}

// nvlinkRemote is what link `link` of g reaches: the NVSwitches round-robin when the
// profile declares switches, else the other GPUs round-robin.
type nvlinkRemote struct {
	kind        nvml.IntNvLinkDeviceType
	bus         busID
	deviceID    uint32
	subsystemID uint32
}

func nvlink(h C.nvmlDevice_t, link C.uint) (*gpu, *nvlinkRemote, nvml.Return) {
	g, r := physical(h)
	if r != nvml.SUCCESS {
		return nil, nil, r
	}
	cfg := state.nvlink
	peers := len(state.gpus) - 1
	if cfg.LinksPerGPU <= 0 || (len(cfg.Switches) == 0 && peers == 0) {
		return nil, nil, nvml.ERROR_NOT_SUPPORTED
	}
	if int(link) >= cfg.LinksPerGPU || int(link) >= nvml.NVLINK_MAX_LINKS {
		return nil, nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if len(cfg.Switches) > 0 {
		sw := cfg.Switches[int(link)%len(cfg.Switches)]
		bus, err := parseBusID(sw.BDF)
		if err != nil {
			return nil, nil, nvml.ERROR_UNKNOWN
		}
		return g, &nvlinkRemote{kind: nvml.NVLINK_DEVICE_TYPE_SWITCH, bus: bus, deviceID: sw.DeviceID}, nvml.SUCCESS
	}
	peer := state.gpus[(g.index+1+int(link)%peers)%len(state.gpus)]
	return g, &nvlinkRemote{
		kind: nvml.NVLINK_DEVICE_TYPE_GPU, bus: peer.bus,
		deviceID: peer.cfg.PCI.DeviceID, subsystemID: peer.cfg.PCI.SubsystemID,
	}, nvml.SUCCESS
}

//export nvmlDeviceGetNvLinkState
func nvmlDeviceGetNvLinkState(device C.nvmlDevice_t, link C.uint, isActive *C.nvmlEnableState_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if _, _, r := nvlink(device, link); r != nvml.SUCCESS {
		return rc(r)
	}
	if isActive == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*isActive = C.nvmlEnableState_t(nvml.FEATURE_ENABLED)
	return rc(nvml.SUCCESS)
}

// nvlinkVersions maps the profile's NVLink generation to nvmlNvlinkVersion_t.
var nvlinkVersions = map[int]nvml.NvlinkVersion{
	1: nvml.NVLINK_VERSION_1_0,
	2: nvml.NVLINK_VERSION_2_0,
	3: nvml.NVLINK_VERSION_3_0,
	4: nvml.NVLINK_VERSION_4_0,
	5: nvml.NVLINK_VERSION_5_0,
}

//export nvmlDeviceGetNvLinkVersion
func nvmlDeviceGetNvLinkVersion(device C.nvmlDevice_t, link C.uint, version *C.uint) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if _, _, r := nvlink(device, link); r != nvml.SUCCESS {
		return rc(r)
	}
	v, known := nvlinkVersions[state.nvlink.Version]
	if !known {
		v = nvml.NVLINK_VERSION_INVALID
	}
	return rc(putUint(version, uint32(v)))
}

//export nvmlDeviceGetNvLinkRemotePciInfo_v2
func nvmlDeviceGetNvLinkRemotePciInfo_v2(device C.nvmlDevice_t, link C.uint, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	_, remote, r := nvlink(device, link)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	return rc(putPciInfo(pci, remote.bus, remote.deviceID, remote.subsystemID))
}

//export nvmlDeviceGetNvLinkRemoteDeviceType
func nvmlDeviceGetNvLinkRemoteDeviceType(device C.nvmlDevice_t, link C.uint, pNvLinkDeviceType *C.nvmlIntNvLinkDeviceType_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	_, remote, r := nvlink(device, link)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if pNvLinkDeviceType == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*pNvLinkDeviceType = C.nvmlIntNvLinkDeviceType_t(remote.kind)
	return rc(nvml.SUCCESS)
}

// --- MIG --------------------------------------------------------------------------------

func migMode(on bool) C.uint {
	if on {
		return C.uint(nvml.DEVICE_MIG_ENABLE)
	}
	return C.uint(nvml.DEVICE_MIG_DISABLE)
}

//export nvmlDeviceGetMigMode
func nvmlDeviceGetMigMode(device C.nvmlDevice_t, currentMode, pendingMode *C.uint) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, r := physical(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if !g.migCapable {
		return rc(nvml.ERROR_NOT_SUPPORTED)
	}
	if currentMode == nil || pendingMode == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*currentMode, *pendingMode = migMode(g.migEnabled), migMode(g.migPending)
	return rc(nvml.SUCCESS)
}

//export nvmlDeviceGetMaxMigDeviceCount
func nvmlDeviceGetMaxMigDeviceCount(device C.nvmlDevice_t, count *C.uint) C.nvmlReturn_t {
	return deviceUint(device, count, func(g *gpu) (uint32, nvml.Return) {
		if !g.migEnabled {
			return ok(0) // "zero if MIG is not supported or enabled"
		}
		return ok(uint32(g.maxMig))
	})
}

//export nvmlDeviceGetMigDeviceHandleByIndex
func nvmlDeviceGetMigDeviceHandleByIndex(device C.nvmlDevice_t, index C.uint, migDevice *C.nvmlDevice_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, r := physical(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if !g.migCapable || !g.migEnabled {
		return rc(nvml.ERROR_NOT_SUPPORTED)
	}
	if migDevice == nil || int(index) >= g.maxMig {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	if int(index) >= len(g.migs) {
		return rc(nvml.ERROR_NOT_FOUND)
	}
	*migDevice = deviceHandle(g.migs[index].handle)
	return rc(nvml.SUCCESS)
}

//export nvmlDeviceGetDeviceHandleFromMigDeviceHandle
func nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice C.nvmlDevice_t, device *C.nvmlDevice_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, m, r := resolve(migDevice)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if m == nil || device == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*device = deviceHandle(g.handle)
	return rc(nvml.SUCCESS)
}

//export nvmlDeviceIsMigDeviceHandle
func nvmlDeviceIsMigDeviceHandle(device C.nvmlDevice_t, isMigDevice *C.uint) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	_, m, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	v := uint32(0)
	if m != nil {
		v = 1
	}
	return rc(putUint(isMigDevice, v))
}

func migUint(h C.nvmlDevice_t, out *C.uint, value func(*migDevice) uint32) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	_, m, r := resolve(h)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if m == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT) // not a MIG device handle
	}
	return rc(putUint(out, value(m)))
}

//export nvmlDeviceGetGpuInstanceId
func nvmlDeviceGetGpuInstanceId(device C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	return migUint(device, id, func(m *migDevice) uint32 { return uint32(m.gi) })
}

//export nvmlDeviceGetComputeInstanceId
func nvmlDeviceGetComputeInstanceId(device C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	return migUint(device, id, func(m *migDevice) uint32 { return uint32(m.ci) })
}

//export nvmlDeviceGetAttributes_v2
func nvmlDeviceGetAttributes_v2(device C.nvmlDevice_t, attributes *C.nvmlDeviceAttributes_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	_, m, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if m == nil {
		return rc(nvml.ERROR_NOT_SUPPORTED) // NVML answers this for MIG device handles only
	}
	if attributes == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	p := m.profile
	*(*nvml.DeviceAttributes)(unsafe.Pointer(attributes)) = nvml.DeviceAttributes{
		MultiprocessorCount:       p.Multiprocessors,
		SharedCopyEngineCount:     p.CopyEngines,
		SharedDecoderCount:        p.Decoders,
		SharedEncoderCount:        p.Encoders,
		SharedJpegCount:           p.JPEG,
		SharedOfaCount:            p.OFA,
		GpuInstanceSliceCount:     m.slices,
		ComputeInstanceSliceCount: m.slices,
		MemorySizeMB:              p.MemoryMB,
	}
	return rc(nvml.SUCCESS)
}

// --- ECC, processes ---------------------------------------------------------------------

func eccCount(h C.nvmlDevice_t, errorType C.nvmlMemoryErrorType_t, out *C.ulonglong) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, _, r := resolve(h)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if out == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*out = 0
	if nvml.MemoryErrorType(errorType) == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
		*out = C.ulonglong(g.eccUncorrected)
	}
	return rc(nvml.SUCCESS)
}

//export nvmlDeviceGetTotalEccErrors
func nvmlDeviceGetTotalEccErrors(device C.nvmlDevice_t, errorType C.nvmlMemoryErrorType_t, counterType C.nvmlEccCounterType_t, eccCounts *C.ulonglong) C.nvmlReturn_t {
	return eccCount(device, errorType, eccCounts)
}

//export nvmlDeviceGetMemoryErrorCounter
func nvmlDeviceGetMemoryErrorCounter(device C.nvmlDevice_t, errorType C.nvmlMemoryErrorType_t, counterType C.nvmlEccCounterType_t, locationType C.nvmlMemoryLocation_t, count *C.ulonglong) C.nvmlReturn_t {
	if nvml.MemoryLocation(locationType) != nvml.MEMORY_LOCATION_DRAM &&
		nvml.MemoryLocation(locationType) != nvml.MEMORY_LOCATION_DEVICE_MEMORY {
		errorType = C.nvmlMemoryErrorType_t(nvml.MEMORY_ERROR_TYPE_CORRECTED) // count 0 elsewhere
	}
	return eccCount(device, errorType, count)
}

//export nvmlDeviceGetEccMode
func nvmlDeviceGetEccMode(device C.nvmlDevice_t, current, pending *C.nvmlEnableState_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if _, r := physical(device); r != nvml.SUCCESS {
		return rc(r)
	}
	if current == nil || pending == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*current = C.nvmlEnableState_t(nvml.FEATURE_ENABLED)
	*pending = C.nvmlEnableState_t(nvml.FEATURE_ENABLED)
	return rc(nvml.SUCCESS)
}

func noProcesses(h C.nvmlDevice_t, infoCount *C.uint) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if _, _, r := resolve(h); r != nvml.SUCCESS {
		return rc(r)
	}
	return rc(putUint(infoCount, 0))
}

//export nvmlDeviceGetComputeRunningProcesses_v3
func nvmlDeviceGetComputeRunningProcesses_v3(device C.nvmlDevice_t, infoCount *C.uint, infos *C.nvmlProcessInfo_t) C.nvmlReturn_t {
	return noProcesses(device, infoCount)
}

//export nvmlDeviceGetGraphicsRunningProcesses_v3
func nvmlDeviceGetGraphicsRunningProcesses_v3(device C.nvmlDevice_t, infoCount *C.uint, infos *C.nvmlProcessInfo_t) C.nvmlReturn_t {
	return noProcesses(device, infoCount)
}

//export nvmlDeviceGetMPSComputeRunningProcesses_v3
func nvmlDeviceGetMPSComputeRunningProcesses_v3(device C.nvmlDevice_t, infoCount *C.uint, infos *C.nvmlProcessInfo_t) C.nvmlReturn_t {
	return noProcesses(device, infoCount)
}

// --- events -----------------------------------------------------------------------------

//export nvmlEventSetCreate
func nvmlEventSetCreate(set *C.nvmlEventSet_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	if set == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	s := &eventSet{masks: map[*gpu]uint64{}}
	s.handle = newHandle(s)
	*set = C.nvmlEventSet_t{handle: (*C.struct_nvmlEventSet_st)(s.handle)}
	return rc(nvml.SUCCESS)
}

func lookupSet(set C.nvmlEventSet_t) *eventSet {
	s, _ := handles[unsafe.Pointer(set.handle)].(*eventSet)
	return s
}

//export nvmlDeviceGetSupportedEventTypes
func nvmlDeviceGetSupportedEventTypes(device C.nvmlDevice_t, eventTypes *C.ulonglong) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if _, r := physical(device); r != nvml.SUCCESS {
		return rc(r)
	}
	if eventTypes == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	*eventTypes = C.ulonglong(supportedEvents)
	return rc(nvml.SUCCESS)
}

//export nvmlDeviceRegisterEvents
func nvmlDeviceRegisterEvents(device C.nvmlDevice_t, eventTypes C.ulonglong, set C.nvmlEventSet_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	g, m, r := resolve(device)
	if r != nvml.SUCCESS {
		return rc(r)
	}
	if m != nil {
		return rc(nvml.ERROR_NOT_SUPPORTED)
	}
	s := lookupSet(set)
	if s == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	if uint64(eventTypes)&^supportedEvents != 0 {
		return rc(nvml.ERROR_NOT_SUPPORTED)
	}
	s.masks[g] |= uint64(eventTypes)
	if uint64(eventTypes)&uint64(nvml.EventTypeXidCriticalError) != 0 {
		// A failure that tripped before anyone listened is waiting in the set.
		for _, code := range g.undelivered {
			s.queue = append(s.queue, event{dev: g, kind: uint64(nvml.EventTypeXidCriticalError), data: code})
		}
		g.undelivered = nil
	}
	return rc(nvml.SUCCESS)
}

// nextEvent pops the set's next event; done says whether to stop waiting.
func nextEvent(set C.nvmlEventSet_t, data *C.nvmlEventData_t) (nvml.Return, bool) {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return nvml.ERROR_UNINITIALIZED, true
	}
	s := lookupSet(set)
	if s == nil || data == nil {
		return nvml.ERROR_INVALID_ARGUMENT, true
	}
	if len(s.queue) == 0 {
		return nvml.ERROR_TIMEOUT, false
	}
	e := s.queue[0]
	s.queue = s.queue[1:]
	*data = C.nvmlEventData_t{
		device:            deviceHandle(e.dev.handle),
		eventType:         C.ulonglong(e.kind),
		eventData:         C.ulonglong(e.data),
		gpuInstanceId:     C.uint(0xFFFFFFFF),
		computeInstanceId: C.uint(0xFFFFFFFF),
	}
	return nvml.SUCCESS, true
}

//export nvmlEventSetWait_v2
func nvmlEventSetWait_v2(set C.nvmlEventSet_t, data *C.nvmlEventData_t, timeoutms C.uint) C.nvmlReturn_t {
	deadline := time.Now().Add(time.Duration(timeoutms) * time.Millisecond)
	for {
		r, done := nextEvent(set, data)
		if done {
			return rc(r)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return rc(nvml.ERROR_TIMEOUT)
		}
		time.Sleep(min(left, waitSlice))
	}
}

//export nvmlEventSetFree
func nvmlEventSetFree(set C.nvmlEventSet_t) C.nvmlReturn_t {
	mu.Lock()
	defer mu.Unlock()
	if !initialized() {
		return rc(nvml.ERROR_UNINITIALIZED)
	}
	s := lookupSet(set)
	if s == nil {
		return rc(nvml.ERROR_INVALID_ARGUMENT)
	}
	delete(handles, s.handle)
	C.free(s.handle)
	return rc(nvml.SUCCESS)
}
