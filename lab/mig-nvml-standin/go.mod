module gpuops.invalid/mocknvml

go 1.22

require (
	github.com/NVIDIA/go-nvml v0.13.0-1
	gopkg.in/yaml.v3 v3.0.1
)
