package harness

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// CommandLine returns the program's arguments quoted so the line can be
// pasted back into a shell.
func CommandLine(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// WriteHeader prints what a reader needs to reproduce and compare a run:
// the command line, the time, the Go toolchain and machine, extra lines
// (for example the Redis version), and the versions of the given modules
// as built into the binary.
func WriteHeader(w io.Writer, args []string, extra []string, modules []string) {
	fmt.Fprintf(w, "command: %s\n", CommandLine(args))
	fmt.Fprintf(w, "date:    %s\n", time.Now().UTC().Format(time.RFC3339))
	host, _ := os.Hostname()
	fmt.Fprintf(w, "go:      %s %s/%s, NumCPU=%d GOMAXPROCS=%d host=%s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), host)
	if la, ok := LoadAvg(); ok {
		fmt.Fprintf(w, "loadavg: %s at start (the machine's other work competes for the same cores)\n", la)
	}
	for _, e := range extra {
		fmt.Fprintln(w, e)
	}
	if bi, ok := debug.ReadBuildInfo(); ok && len(modules) > 0 {
		var vs []string
		for _, m := range modules {
			for _, d := range bi.Deps {
				if d.Path == m {
					v := d.Version
					if d.Replace != nil {
						v = "=> " + d.Replace.Path
					}
					vs = append(vs, m+" "+v)
				}
			}
		}
		if len(vs) > 0 {
			fmt.Fprintf(w, "modules: %s\n", strings.Join(vs, ", "))
		}
	}
}

// LoadAvg returns the 1, 5 and 15 minute load averages as /proc/loadavg
// gives them, where the platform has it.
func LoadAvg() (string, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "", false
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "", false
	}
	return strings.Join(f[:3], " "), true
}
