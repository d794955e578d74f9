package ir

import (
	"strings"
	"testing"
)

// TestRMSNormEps: a non-positive eps is rejected (it gives NaN for a zero row).
func TestRMSNormEps(t *testing.T) {
	x, _ := ParseType("f32[T,8]")
	w, _ := ParseType("f32[8]")
	for _, eps := range []float64{0, -1e-6} {
		if _, err := InferTypes("rms_norm", []Type{x, w}, Attrs{"eps": eps}); err == nil || !strings.Contains(err.Error(), "eps must be positive") {
			t.Errorf("eps %g: %v", eps, err)
		}
	}
	if _, err := InferTypes("rms_norm", []Type{x, w}, Attrs{"eps": 1e-6}); err != nil {
		t.Error(err)
	}
}
