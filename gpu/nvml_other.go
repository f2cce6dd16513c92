//go:build !(linux && cgo)

package gpu

import "errors"

// discoverNVML is unavailable without cgo on linux: go-nvml dlopens
// libnvidia-ml through cgo. Discover falls back to nvidia-smi.
func discoverNVML() ([]Device, error) {
	return nil, errors.New("not in this build (needs linux and cgo)")
}
