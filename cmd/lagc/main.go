// Command lagc compiles and runs Laguna mixture-of-experts models.
//
// Each subcommand lives in its own file and registers itself in init with
// register, so commands can be added without touching this file.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one lagc subcommand.
type command struct {
	name    string
	summary string // one line for `lagc help`
	usage   string // argument synopsis, e.g. "compile MODEL.yaml [flags]"
	// setup declares the command's flags on fs and returns the function that
	// runs it with the remaining positional arguments.
	setup func(fs *flag.FlagSet) func(args []string) error
	// groups, when set, order the flags under headings in `lagc help`;
	// flags in no group follow under "Other flags".
	groups []flagGroup
}

// flagGroup is a heading of a command's help and the flags under it.
type flagGroup struct {
	title string
	flags []string
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("lagc: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks an error caused by bad command-line use; main exits with 2.
var errUsage = errors.New("usage error")

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) >= 2 && args[0] == "help" {
			if c, ok := commands[args[1]]; ok {
				fs := newFlagSet(c, stderr)
				c.setup(fs)
				printCommandHelp(stdout, c, fs)
				return 0
			}
			fmt.Fprintf(stderr, "lagc: unknown command %q\n", args[1])
			return 2
		}
		printHelp(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "lagc: unknown command %q (run `lagc help` for the list)\n", args[0])
		return 2
	}
	fs := newFlagSet(c, stderr)
	run := c.setup(fs)
	if err := fs.Parse(reorderFlags(fs, args[1:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(stdout, c, fs)
			return 0
		}
		fmt.Fprintf(stderr, "run `lagc help %s` for the flags\n", c.name)
		return 2
	}
	if err := run(fs.Args()); err != nil {
		fmt.Fprintf(stderr, "lagc %s: %v\n", c.name, err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func newFlagSet(c *command, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("lagc "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	// Parse errors print one line to stderr; --help is printed by runMain.
	fs.Usage = func() {}
	return fs
}

// reorderFlags moves positional arguments after the flags so that
// `lagc compile models/laguna.yaml --preset x` works as users expect.
func reorderFlags(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(flags, pos...)
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "lagc: a compiler and executor for Laguna mixture-of-experts models")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: lagc COMMAND [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `lagc help COMMAND` or `lagc COMMAND --help` for a command's flags.")
}

func printCommandHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "lagc %s: %s\n\nUsage: lagc %s\n", c.name, c.summary, c.usage)
	listed := map[string]bool{}
	for _, g := range c.groups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.flags {
			if f := fs.Lookup(name); f != nil {
				printFlag(w, f)
				listed[name] = true
			}
		}
	}
	title := "Flags"
	if len(c.groups) > 0 {
		title = "Other flags"
	}
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if listed[f.Name] {
			return
		}
		if first {
			fmt.Fprintf(w, "\n%s:\n", title)
			first = false
		}
		printFlag(w, f)
	})
}

// printFlag prints one flag as flag.PrintDefaults does.
func printFlag(w io.Writer, f *flag.Flag) {
	arg, usage := flag.UnquoteUsage(f)
	if arg == "value" {
		arg = "string" // a repeatable string flag
	}
	line := "  -" + f.Name
	if arg != "" {
		line += " " + arg
	}
	if len(line) <= 4 { // a one-letter flag without argument name fits
		line += "\t"
	} else {
		line += "\n    \t"
	}
	line += strings.ReplaceAll(usage, "\n", "\n    \t")
	switch {
	case f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false" || f.DefValue == "[]":
	case arg == "string":
		line += fmt.Sprintf(" (default %q)", f.DefValue)
	default:
		line += fmt.Sprintf(" (default %s)", f.DefValue)
	}
	fmt.Fprintln(w, line)
}
