// Package cause classifies why a call to a rate-limit store failed, for
// package fallback's counters and logs and package otel's error.type: one
// classification for both.
package cause

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// Causes, in the order of Index.
const (
	Timeout  = "timeout"
	Refused  = "refused"
	Reset    = "reset"
	NoScript = "noscript"
	OOM      = "oom"
	Redirect = "redirect"
	Other    = "other"
)

// Names lists the causes by index.
var Names = [...]string{Timeout, Refused, Reset, NoScript, OOM, Redirect, Other}

// N is the number of causes.
const N = len(Names)

// TimeoutIndex is Timeout's index in Names.
const TimeoutIndex = 0

// Index classifies a failed call's error: an index into Names.
func Index(err error) int {
	switch {
	case IsTimeout(err):
		return TimeoutIndex
	case errors.Is(err, syscall.ECONNREFUSED):
		return 1
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return 2
	}
	msg := err.Error()
	for _, p := range [...]struct {
		prefix string
		i      int
	}{{"NOSCRIPT", 3}, {"OOM", 4}, {"MOVED", 5}, {"ASK", 5}, {"CLUSTERDOWN", 5}, {"TRYAGAIN", 5}} {
		if hasReplyPrefix(msg, p.prefix) {
			return p.i
		}
	}
	return 6
}

// IsTimeout reports whether err is a deadline running out: the context's,
// or a network deadline derived from it.
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// hasReplyPrefix reports whether a Redis error reply with the given prefix
// appears in msg, at its start or after a wrapping "...: ".
func hasReplyPrefix(msg, prefix string) bool {
	return strings.HasPrefix(msg, prefix+" ") || strings.Contains(msg, ": "+prefix+" ")
}
