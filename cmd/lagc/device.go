package main

import (
	"errors"
	"fmt"

	"lagc/ckpt"
	"lagc/cuda"
	"lagc/models"
)

// gpuUnavailable says why `--device auto` cannot use the GPU: a short
// reason and the details (the libraries tried); both "" when it can.
func gpuUnavailable() (short, detail string) {
	n, err := cuda.DeviceCount()
	if err == nil && n == 0 {
		return "no CUDA GPU was found", "the driver lists no devices"
	}
	if err == nil {
		_, err = cuda.NVRTCVersion()
	}
	if err == nil {
		return "", ""
	}
	for _, e := range []error{cuda.ErrNoDriver, cuda.ErrNoDevice, cuda.ErrNoNVRTC} {
		if errors.Is(err, e) {
			return e.Error(), err.Error()
		}
	}
	return "CUDA could not be initialised", err.Error()
}

// openModelCheckpoint opens --model, or without it the bundled model (a
// 2.8M-parameter Laguna trained on Go source), and returns the name to
// show for it. The bundled model comes from the cache, or from memory
// where the cache cannot be written (said with verbose).
func openModelCheckpoint(model string, verbose bool) (ckpt.Checkpoint, string, error) {
	if model != "" {
		ck, err := ckpt.Open(model)
		return ck, model, err
	}
	ck, cacheErr, err := models.OpenBundled()
	if err != nil {
		return nil, "", fmt.Errorf("no --model given and the bundled model could not be opened: %w", err)
	}
	if cacheErr != nil && verbose {
		fmt.Fprintf(runIO.err, "reading the bundled model from memory: %v\n", cacheErr)
	}
	return ck, models.BundledName, nil
}
