package main

import (
	"fmt"

	"lagc/ckpt"
	"lagc/config"
)

// modelShape resolves the --preset / --config / --model flags that compile
// and plan share: exactly one must be given. It returns the configuration,
// the opened checkpoint for --model (the caller closes it; nil otherwise)
// and a description of where the shape came from.
func modelShape(preset, configPath, model string) (*config.Config, ckpt.Checkpoint, string, error) {
	n := 0
	for _, s := range []string{preset, configPath, model} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return nil, nil, "", fmt.Errorf("%w: give exactly one of --preset, --config or --model", errUsage)
	}
	switch {
	case preset != "":
		cfg, err := config.Preset(preset)
		if err != nil {
			return nil, nil, "", fmt.Errorf("%w: --preset: %v", errUsage, err)
		}
		return cfg, nil, "preset " + preset, nil
	case configPath != "":
		cfg, err := config.LoadHFConfig(configPath)
		return cfg, nil, configPath, err
	}
	ck, err := ckpt.Open(model)
	if err != nil {
		return nil, nil, "", err
	}
	return ck.Config(), ck, model, nil
}
