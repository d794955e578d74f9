// Package progress reports the progress of long jobs (loading, converting,
// compiling): on a terminal a bar with throughput and ETA redrawn in place;
// otherwise plain lines, at most one every few seconds, fit for logs.
package progress

import (
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
)

// Bar is one progress report. Its methods are safe for concurrent use.
type Bar struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	unit     string
	total    int64
	done     int64
	start    time.Time
	last     time.Time // last draw
	term     bool
	interval time.Duration
	now      func() time.Time
	finished bool
}

// Intervals between reports.
const (
	TerminalInterval = 100 * time.Millisecond
	PlainInterval    = 5 * time.Second
)

// New starts a report on w of total units (bytes when unit is "B", which
// are shown in KiB/MiB/GiB; a total <= 0 means unknown). A terminal w gets a
// bar redrawn in place; anything else gets plain lines.
func New(w io.Writer, label string, total int64, unit string) *Bar {
	b := &Bar{w: w, label: label, unit: unit, total: total, now: time.Now, term: isTerminal(w)}
	b.interval = PlainInterval
	if b.term {
		b.interval = TerminalInterval
	}
	b.start = b.now()
	b.last = b.start
	return b
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// Add records n more units done (n <= 0 changes nothing).
func (b *Bar) Add(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished || n <= 0 {
		return
	}
	b.done += n
	if t := b.now(); t.Sub(b.last) >= b.interval {
		b.last = t
		b.draw(t)
	}
}

// SetTotal changes the total, for jobs that learn their size late.
func (b *Bar) SetTotal(total int64) {
	b.mu.Lock()
	b.total = total
	b.mu.Unlock()
}

// Done ends the report with a summary line. Later calls do nothing.
func (b *Bar) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.finished = true
	t := b.now()
	el := t.Sub(b.start)
	line := fmt.Sprintf("%s: done, %s in %s", b.label, b.amount(b.done), fmtDuration(el))
	if rate := b.rate(el); rate > 0 {
		line += fmt.Sprintf(" (%s/s)", b.amount(int64(math.Round(rate))))
	}
	if b.term {
		fmt.Fprintf(b.w, "\r%s\x1b[K\n", line)
		return
	}
	fmt.Fprintln(b.w, line)
}

func (b *Bar) rate(el time.Duration) float64 {
	if el <= 0 {
		return 0
	}
	return float64(b.done) / el.Seconds()
}

// draw writes the current state; the caller holds mu.
func (b *Bar) draw(t time.Time) {
	el := t.Sub(b.start)
	rate := b.rate(el)
	var sb strings.Builder
	sb.WriteString(b.label)
	if b.term {
		sb.WriteString(" ")
		if b.total > 0 {
			sb.WriteString(bar(b.done, b.total, 24))
			sb.WriteString(" ")
		}
	} else {
		sb.WriteString(": ")
	}
	if b.total > 0 {
		fmt.Fprintf(&sb, "%3.0f%% %s/%s", 100*min(1, float64(b.done)/float64(b.total)), b.number(b.done, b.total), b.amount(b.total))
	} else {
		sb.WriteString(b.amount(b.done))
	}
	if rate > 0 {
		fmt.Fprintf(&sb, ", %s/s", b.amount(int64(math.Round(rate))))
		if b.total > b.done {
			eta := time.Duration(float64(b.total-b.done) / rate * float64(time.Second))
			fmt.Fprintf(&sb, ", ETA %s", fmtDuration(eta))
		}
	}
	if b.term {
		fmt.Fprintf(b.w, "\r%s\x1b[K", sb.String())
	} else {
		fmt.Fprintln(b.w, sb.String())
	}
}

func bar(done, total int64, width int) string {
	fill := int(float64(width) * min(1, float64(done)/float64(total)))
	return "[" + strings.Repeat("=", fill) + strings.Repeat(" ", width-fill) + "]"
}

// amount formats n units with the unit name ("1.5 MiB", "12 tensors").
func (b *Bar) amount(n int64) string {
	return b.number(n, n) + b.unitFor(n)
}

// number formats n scaled as a count of size ref would be, so that
// "done/total" share one prefix.
func (b *Bar) number(n, ref int64) string {
	if b.unit != "B" {
		return fmt.Sprint(n)
	}
	div, _ := binaryScale(ref)
	if div == 1 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%.1f", float64(n)/div)
}

func (b *Bar) unitFor(ref int64) string {
	switch b.unit {
	case "":
		return ""
	case "B":
		_, prefix := binaryScale(ref)
		return " " + prefix + "B"
	}
	return " " + b.unit
}

// binaryScale picks the power of 1024 to show n in.
func binaryScale(n int64) (float64, string) {
	prefixes := []string{"", "Ki", "Mi", "Gi", "Ti", "Pi"}
	v, div := math.Abs(float64(n)), 1.0
	i := 0
	for v >= 1024 && i < len(prefixes)-1 {
		v /= 1024
		div *= 1024
		i++
	}
	return div, prefixes[i]
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
