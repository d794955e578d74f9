//go:build !linux

package cuda

// SignalsWithoutOnStack reports nothing where lagc does not inspect signal
// handlers (see signals_linux.go).
func SignalsWithoutOnStack(fix bool) ([]int, error) { return nil, nil }
