package cuda

import "unsafe"

// DriverVersion loads the driver (once per process, as DeviceCount does)
// and returns the CUDA version it supports, e.g. 13000 for 13.0, without
// opening a device. The error wraps ErrNoDriver or ErrNoDevice where CUDA
// is unavailable.
func DriverVersion() (int, error) {
	api, err := loadDriver()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := api.err("cuDriverGetVersion", call(api.driverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return 0, err
	}
	return int(v), nil
}
