// Package cgroupfs finds the process's cgroups: the parsing of
// /proc/self/cgroup and /proc/self/mountinfo that the CPU meter (package
// shedder/cpu) and the memory meter (package shedder/mem) share. It
// decides where a cgroup's files lie under a mount (a cgroup namespace
// seeing its own cgroup as "/", or a host view with the full path under
// the mount's root); which files to read, and what they mean, is the
// meters' business. Its errors carry no package prefix: the meters add
// theirs.
package cgroupfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Mount is one cgroup or cgroup2 line of mountinfo.
type Mount struct {
	Root, Point string   // the hierarchy path mounted, and where (unrooted)
	FSType      string   // "cgroup" (v1) or "cgroup2"
	Opts        []string // super options: the v1 controllers
}

// Groups parses proc/self/cgroup under root into controller -> cgroup
// path; the v2 entry ("0::/path") is under "" and a named v1 hierarchy
// ("name=systemd") under its name.
func Groups(root fs.FS) (map[string]string, error) {
	data, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		parts := strings.SplitN(string(line), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return nil, fmt.Errorf("/proc/self/cgroup line %d: %q is not ID:controllers:/path", i+1, line)
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// Mounts returns the cgroup and cgroup2 mounts of proc/self/mountinfo
// under root.
func Mounts(root fs.FS) ([]Mount, error) {
	f, err := root.Open("proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		// ID parent major:minor root point options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 6 || len(fields) < sep+4 {
			return nil, fmt.Errorf("/proc/self/mountinfo line %d is malformed", n)
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, Mount{
			Root:   unescape(fields[3]),
			Point:  strings.TrimPrefix(path.Clean(unescape(fields[4])), "/"),
			FSType: fstype,
			Opts:   strings.Split(fields[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/proc/self/mountinfo: %w", err)
	}
	return out, nil
}

// Resolve returns the unrooted directory of cgroup path p in mount m, and
// false when p lies outside what m mounts.
func Resolve(m Mount, p string) (string, bool) {
	rel := p
	if m.Root != "/" {
		r, ok := strings.CutPrefix(p, m.Root)
		if !ok || (r != "" && !strings.HasPrefix(r, "/")) {
			return "", false
		}
		rel = r
	}
	dir := path.Join(m.Point, rel)
	if dir == "" {
		dir = "."
	}
	return dir, true
}

// Up calls f with dir and each of its parents up to top (the mount
// point), nearest first, and stops at the first error f returns.
func Up(dir, top string, f func(dir string) error) error {
	for d := dir; ; d = path.Dir(d) {
		if err := f(d); err != nil {
			return err
		}
		if d == top || d == "." || d == "/" {
			return nil
		}
	}
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
