package fallback

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// Causes of a failed call to the primary store, as counted in
// Stats.Causes and named in logs.
const (
	CauseTimeout  = "timeout"  // the call ran out of its budget
	CauseRefused  = "refused"  // nothing listens: the server is down
	CauseReset    = "reset"    // the connection broke mid-call
	CauseNoScript = "noscript" // the script cache was lost and not reloaded
	CauseOOM      = "oom"      // Redis is out of memory (maxmemory, noeviction)
	CauseRedirect = "redirect" // a Redis Cluster redirect (MOVED, ASK, CLUSTERDOWN, TRYAGAIN)
	CauseOther    = "other"
)

const (
	causeTimeout = iota
	causeRefused
	causeReset
	causeNoScript
	causeOOM
	causeRedirect
	causeOther
	numCauses
)

var causeNames = [numCauses]string{CauseTimeout, CauseRefused, CauseReset, CauseNoScript, CauseOOM, CauseRedirect, CauseOther}

// causeOf classifies a failed call's error.
func causeOf(err error) int {
	switch {
	case isTimeout(err):
		return causeTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return causeRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return causeReset
	}
	msg := err.Error()
	for _, p := range [...]struct {
		prefix string
		cause  int
	}{{"NOSCRIPT", causeNoScript}, {"OOM", causeOOM}, {"MOVED", causeRedirect}, {"ASK", causeRedirect},
		{"CLUSTERDOWN", causeRedirect}, {"TRYAGAIN", causeRedirect}} {
		if hasReplyPrefix(msg, p.prefix) {
			return p.cause
		}
	}
	return causeOther
}

// hasReplyPrefix reports whether a Redis error reply with the given prefix
// appears in msg, at its start or after a wrapping "...: ".
func hasReplyPrefix(msg, prefix string) bool {
	if strings.HasPrefix(msg, prefix+" ") {
		return true
	}
	return strings.Contains(msg, ": "+prefix+" ")
}
