package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
)

// Brancher is a Queue on which a program may run launches beside each
// other: between a lower.Fork and its lower.Join, the side launches
// (lower.Launch.Stream 1) go to the queue Fork returns.
type Brancher interface {
	// Fork returns the side queue: what is queued on it runs after
	// everything queued here so far, beside what is queued here next.
	Fork() (Queue, error)
	// Join makes what is queued here next wait for everything queued on
	// the side queue.
	Join() error
}

// streamBranch is a stream's Brancher: a second stream (programmatic
// launches as the first's) and an event each way. Stream capture follows
// the events, so a captured graph holds the branch as two paths.
type streamBranch struct {
	main, side     *cuda.Stream
	forked, joined *cuda.Event
}

func newStreamBranch(dev *cuda.Device, main *cuda.Stream) (*streamBranch, error) {
	b := &streamBranch{main: main}
	var err error
	if b.side, err = dev.NewStream(); err != nil {
		return nil, fmt.Errorf("the side stream of a branch: %w", err)
	}
	b.side.SetProgrammaticLaunch(main.ProgrammaticLaunch())
	if b.forked, err = dev.NewSyncEvent(); err == nil {
		b.joined, err = dev.NewSyncEvent()
	}
	if err != nil {
		_ = b.close()
		return nil, fmt.Errorf("the events of a branch: %w", err)
	}
	return b, nil
}

func (b *streamBranch) Fork() (Queue, error) {
	if err := b.main.Record(b.forked); err != nil {
		return nil, err
	}
	return b.side, b.side.WaitEvent(b.forked)
}

func (b *streamBranch) Join() error {
	if err := b.side.Record(b.joined); err != nil {
		return err
	}
	return b.main.WaitEvent(b.joined)
}

func (b *streamBranch) close() error {
	var first error
	for _, e := range []*cuda.Event{b.forked, b.joined} {
		if e != nil {
			if err := e.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	if b.side != nil {
		if err := b.side.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// fork starts a branch of the program being run: the queue its side
// launches go to. Hooked runs (a profile, a check, a census) and a queue
// without branches run them in line (the same launches one after
// another: the same bits).
func (e *Executor) fork() (Queue, error) {
	if e.hooked() {
		return e.q, nil
	}
	if b, ok := e.q.(Brancher); ok {
		return b.Fork()
	}
	if e.branch != nil && e.q == Queue(e.s) {
		return e.branch.Fork()
	}
	return e.q, nil
}

// join ends the branch whose side queue is side.
func (e *Executor) join(side Queue) error {
	switch {
	case side == nil:
		return fmt.Errorf("a %s without its %s", lower.Join, lower.Fork)
	case side == e.q:
		return nil
	}
	if b, ok := e.q.(Brancher); ok {
		return b.Join()
	}
	return e.branch.Join()
}

// needBranch creates the executor's streamBranch if launches has a fork
// and there is a stream to branch from (not on a dry run).
func (e *Executor) needBranch(launches [][]lower.Launch) error {
	if e.branch != nil || e.s == nil || e.dev == nil {
		return nil
	}
	for _, ls := range launches {
		for _, l := range ls {
			if l.Kernel == lower.Fork {
				var err error
				e.branch, err = newStreamBranch(e.dev, e.s)
				return err
			}
		}
	}
	return nil
}
