// Copyright (c) gpuops.k8s contributors
// GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
// SPDX-License-Identifier: GPL-3.0-or-later

// Command mocknvml is gpuops.k8s's MIG NVML stand-in: OUR OWN library, used only by the
// tests that need MIG instances, which NVIDIA's mock NVML (lab/mocknvml) does not model
// (README.md lists them). Built with `go build -buildmode=c-shared` into a
// libnvidia-ml.so.1 it exports the NVML C API with the prototypes of go-nvml's nvml.h,
// writes results through go-nvml's cgo-generated types, and reads the same YAML profiles
// (MOCK_NVML_CONFIG) as NVIDIA's mock, plus a MIG table (<profile>.mig.yaml).
//
// Build it with lab/mig-nvml-standin/build.sh: that copies nvml.h from the go-nvml module into
// include/ and generates stubs_gen.c (every other nvml.h function, answering
// NVML_ERROR_NOT_SUPPORTED) with ./internal/genstubs before `go build`.
package main

/*
#include "nvml.h"
*/
import "C"

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func main() {}

// The results are written through go-nvml's types (cgo -godefs of the same nvml.h):
// these constants fail to compile if a layout ever differed from the C struct's.
const (
	_ = unsafe.Sizeof(C.nvmlPciInfo_t{}) - unsafe.Sizeof(nvml.PciInfo{})
	_ = unsafe.Sizeof(nvml.PciInfo{}) - unsafe.Sizeof(C.nvmlPciInfo_t{})
	_ = unsafe.Offsetof(C.nvmlPciInfo_t{}.busId) - unsafe.Offsetof(nvml.PciInfo{}.BusId)
	_ = unsafe.Offsetof(nvml.PciInfo{}.BusId) - unsafe.Offsetof(C.nvmlPciInfo_t{}.busId)
	_ = unsafe.Sizeof(C.nvmlMemory_t{}) - unsafe.Sizeof(nvml.Memory{})
	_ = unsafe.Sizeof(nvml.Memory{}) - unsafe.Sizeof(C.nvmlMemory_t{})
	_ = unsafe.Sizeof(C.nvmlMemory_v2_t{}) - unsafe.Sizeof(nvml.Memory_v2{})
	_ = unsafe.Sizeof(nvml.Memory_v2{}) - unsafe.Sizeof(C.nvmlMemory_v2_t{})
	_ = unsafe.Offsetof(C.nvmlMemory_v2_t{}.total) - unsafe.Offsetof(nvml.Memory_v2{}.Total)
	_ = unsafe.Offsetof(nvml.Memory_v2{}.Total) - unsafe.Offsetof(C.nvmlMemory_v2_t{}.total)
	_ = unsafe.Sizeof(C.nvmlDeviceAttributes_t{}) - unsafe.Sizeof(nvml.DeviceAttributes{})
	_ = unsafe.Sizeof(nvml.DeviceAttributes{}) - unsafe.Sizeof(C.nvmlDeviceAttributes_t{})
)
