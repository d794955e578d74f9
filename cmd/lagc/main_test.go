package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// envRunAsLagc makes the test binary behave as lagc itself, so that tests
// can run the command as a separate process: real argv, stdin, exit status
// and signals.
const envRunAsLagc = "LAGC_TEST_RUN_AS_LAGC"

func TestMain(m *testing.M) {
	if os.Getenv(envRunAsLagc) == "1" {
		os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// lagcCommand returns a command that runs lagc with args in a process of
// its own.
func lagcCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envRunAsLagc+"=1")
	return cmd
}

// runBinary runs lagc as a process with stdin and returns its exit status
// and output.
func runBinary(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := lagcCommand(t, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// lagcProcess is lagc running as a process whose stderr the test reads as
// it comes, to act (type, interrupt) at the right moment.
type lagcProcess struct {
	cmd    *exec.Cmd
	stdin  io.Writer
	stderr io.Reader
	log    strings.Builder
}

func startLagc(t *testing.T, args ...string) *lagcProcess {
	t.Helper()
	p := &lagcProcess{cmd: lagcCommand(t, args...)}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if p.stderr, err = p.cmd.StderrPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor reads stderr until s has appeared count times.
func (p *lagcProcess) waitFor(t *testing.T, s string, count int) {
	t.Helper()
	buf := make([]byte, 4096)
	for strings.Count(p.log.String(), s) < count {
		n, err := p.stderr.Read(buf)
		p.log.Write(buf[:n])
		if err != nil {
			t.Fatalf("lagc ended while the test waited for %q: %v\n%s", s, err, p.log.String())
		}
	}
}

// wait reads the rest of stderr and waits for the process to exit.
func (p *lagcProcess) wait(t *testing.T) error {
	t.Helper()
	if _, err := io.Copy(&p.log, p.stderr); err != nil {
		t.Fatal(err)
	}
	return p.cmd.Wait()
}

// TestHelpArgumentNames: `lagc help COMMAND` shows each flag's argument as
// its type (bool flags take none). A back-quoted word in a usage string
// becomes the argument name instead (flag.UnquoteUsage): `-raw
// tokenizer.encode(...)` for a bool flag, `-dump-after all`.
func TestHelpArgumentNames(t *testing.T) {
	for name, c := range commands {
		fs := newFlagSet(c, io.Discard)
		c.setup(fs)
		fs.VisitAll(func(f *flag.Flag) {
			arg, _ := flag.UnquoteUsage(f)
			switch arg {
			case "", "string", "int", "uint", "float", "duration", "value":
			default:
				t.Errorf("lagc help %s: -%s shows argument %q: back quotes in its usage", name, f.Name, arg)
			}
		})
	}
}

// TestHelpListsEveryFlagOnce: each command's help shows every flag exactly
// once, under its group heading where the command groups them; groups name
// only flags that exist.
func TestHelpListsEveryFlagOnce(t *testing.T) {
	for name, c := range commands {
		fs := newFlagSet(c, io.Discard)
		c.setup(fs)
		var b bytes.Buffer
		printCommandHelp(&b, c, fs)
		help := b.String()
		fs.VisitAll(func(f *flag.Flag) {
			if n := strings.Count(help, "\n  -"+f.Name+" ") + strings.Count(help, "\n  -"+f.Name+"\n") + strings.Count(help, "\n  -"+f.Name+"\t"); n != 1 {
				t.Errorf("lagc help %s shows -%s %d times", name, f.Name, n)
			}
		})
		for _, g := range c.groups {
			if !strings.Contains(help, "\n"+g.title+":\n") {
				t.Errorf("lagc help %s lacks the heading %q", name, g.title)
			}
			for _, f := range g.flags {
				if fs.Lookup(f) == nil {
					t.Errorf("lagc help %s: group %q names -%s, which is not a flag", name, g.title, f)
				}
			}
		}
	}
	code, out, _ := runCapture(t, "help", "run")
	if code != 0 || !strings.Contains(out, "Prompt (one of") || !strings.Contains(out, "\nGeneration:\n  -n int") || strings.Contains(out, "Other flags") {
		t.Fatalf("lagc help run: exit %d\n%s", code, out)
	}
}
