package main

import (
	"fmt"

	"lagc/cuda"
	"lagc/models"
)

// gpuUnavailable says in one sentence why `--device auto` cannot use the
// GPU, or returns "" when it can.
func gpuUnavailable() string {
	n, err := cuda.DeviceCount()
	if err != nil {
		return err.Error()
	}
	if n == 0 {
		return "no CUDA GPU was found"
	}
	if _, err := cuda.NVRTCVersion(); err != nil {
		return err.Error()
	}
	return ""
}

// bundledModelPath extracts the tiny model embedded in the binary
// (models/tiny: a 2.8M-parameter Laguna trained on Go source) into the
// cache and returns its directory.
func bundledModelPath() (string, error) {
	dir, err := models.ExtractBundled()
	if err != nil {
		return "", fmt.Errorf("no --model given and the bundled model could not be extracted: %w", err)
	}
	return dir, nil
}
