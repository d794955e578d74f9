package lower

import (
	"fmt"
	"math"
)

// Argument checks shared by the kernel rules: a bad argument is an error
// naming the op and the value, never a launch.

// checkDT accepts the storage dtypes the op kernels are written for.
func checkDT(op string, dts ...string) error {
	for _, dt := range dts {
		switch dt {
		case "f32", "bf16", "f16":
		default:
			return fmt.Errorf("%s: dtype %q is not supported (f32, bf16, f16)", op, dt)
		}
	}
	return nil
}

// checkPos fails unless every named value is positive and fits an int32
// kernel argument.
func checkPos(op string, kv ...any) error {
	for i := 0; i+1 < len(kv); i += 2 {
		name, _ := kv[i].(string)
		v, _ := kv[i+1].(int)
		if v <= 0 || v > math.MaxInt32 {
			return fmt.Errorf("%s: %s = %d must be in [1, %d]", op, name, v, math.MaxInt32)
		}
	}
	return nil
}

// checkPtrs fails on a null pointer.
func checkPtrs(op string, kv ...any) error {
	for i := 0; i+1 < len(kv); i += 2 {
		name, _ := kv[i].(string)
		if p, _ := kv[i+1].(Ptr); p.Null() {
			return fmt.Errorf("%s: %s is a null pointer", op, name)
		}
	}
	return nil
}

// dtypeSize is the element size of a storage dtype.
func dtypeSize(dt string) int {
	switch dt {
	case "f32", "i32":
		return 4
	case "bf16", "f16":
		return 2
	}
	return 0
}
