package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Graph is a captured CUDA graph (a template; Instantiate it to run it).
type Graph struct {
	dev *Device
	h   uintptr
}

// GraphExec is an instantiated graph, launched as one unit.
type GraphExec struct {
	dev *Device
	h   uintptr
}

// Capture modes (CUstreamCaptureMode). Thread-local fits the discipline
// here: the capturing goroutine holds its thread for the whole capture, so
// unsafe calls it makes during capture (an allocation, a synchronous copy)
// fail, while other goroutines on other threads are unaffected.
const captureModeThreadLocal = 1

// Capture records the work record queues on s into a graph instead of
// running it. record must queue work on s only (through s's methods; other
// streams may join through events). The goroutine stays locked to its OS
// thread during record, as CUDA requires capture to end where it began.
func (s *Stream) Capture(record func() error) (*Graph, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := s.lockedDo(func(api *driverAPI) error {
		return api.err("cuStreamBeginCapture_v2", call(api.streamBeginCapture, s.h, captureModeThreadLocal))
	}); err != nil {
		return nil, err
	}
	recErr := record()
	g := &Graph{dev: s.dev}
	endErr := s.lockedDo(func(api *driverAPI) error {
		return api.err("cuStreamEndCapture", call(api.streamEndCapture, s.h, uintptr(unsafe.Pointer(&g.h))))
	})
	if recErr != nil || endErr != nil {
		if g.h != 0 {
			_ = g.Close()
		}
		if recErr != nil {
			return nil, fmt.Errorf("cuda: capture: %w", errors.Join(recErr, endErr))
		}
		return nil, fmt.Errorf("cuda: capture: %w", endErr)
	}
	return g, nil
}

// Instantiate makes an executable graph.
func (g *Graph) Instantiate() (*GraphExec, error) {
	e := &GraphExec{dev: g.dev}
	err := g.dev.do(func() error {
		return g.dev.api.err("cuGraphInstantiateWithFlags", call(g.dev.api.graphInstantiate, uintptr(unsafe.Pointer(&e.h)), g.h, 0))
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Close destroys the graph template (instantiated graphs stay valid).
func (g *Graph) Close() error {
	if g.h == 0 {
		return nil
	}
	err := g.dev.do(func() error { return g.dev.api.err("cuGraphDestroy", call(g.dev.api.graphDestroy, g.h)) })
	g.h = 0
	return err
}

// Launch queues one replay of the graph on s.
func (e *GraphExec) Launch(s *Stream) error {
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuGraphLaunch", call(api.graphLaunch, e.h, s.h))
	})
}

// graphExecUpdateResultInfo mirrors CUgraphExecUpdateResultInfo.
type graphExecUpdateResultInfo struct {
	result        int32
	_             int32
	errorNode     uintptr
	errorFromNode uintptr
}

// Update makes e run g, a re-capture of a changed plan: in place when g has
// the same topology (only parameters, such as kernel arguments or sizes,
// differ), else by instantiating g anew. It reports which happened. Queue
// no replays of e concurrently with Update.
func (e *GraphExec) Update(g *Graph) (reinstantiated bool, err error) {
	var info graphExecUpdateResultInfo
	err = e.dev.do(func() error {
		r := call(e.dev.api.graphExecUpdate, e.h, g.h, uintptr(unsafe.Pointer(&info)))
		if r == resSuccess {
			return nil
		}
		if r != resGraphUpdateFailure {
			return e.dev.api.err("cuGraphExecUpdate_v2", r)
		}
		var nh uintptr
		if err := e.dev.api.err("cuGraphInstantiateWithFlags", call(e.dev.api.graphInstantiate, uintptr(unsafe.Pointer(&nh)), g.h, 0)); err != nil {
			return err
		}
		_ = call(e.dev.api.graphExecDestroy, e.h)
		e.h = nh
		reinstantiated = true
		return nil
	})
	return reinstantiated, err
}

// Close destroys the executable graph.
func (e *GraphExec) Close() error {
	if e.h == 0 {
		return nil
	}
	err := e.dev.do(func() error { return e.dev.api.err("cuGraphExecDestroy", call(e.dev.api.graphExecDestroy, e.h)) })
	e.h = 0
	return err
}
