package main

import (
	"fmt"

	"lagc/cuda"
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
	return "the GPU executor is not wired into `lagc run` yet"
}

// bundledModelPath is replaced once the bundled model lands.
func bundledModelPath() (string, error) {
	return "", fmt.Errorf("%w: no --model given and this build has no bundled model", errUsage)
}
