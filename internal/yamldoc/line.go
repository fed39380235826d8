package yamldoc

import (
	"bytes"

	"go.yaml.in/yaml/v3"
)

// The line of a YAML syntax error.
//
// yaml.v3 does not say where a syntax error is: its message carries the
// line of the construct being read when the problem was found (the
// enclosing block mapping, say), and for parser errors that line is
// counted from 0. A tab on line 3 comes out as line 2, a mis-indented key
// on line 4 as line 1. That line is never after the problem, so the loader
// finds the problem itself: the line is the first one at which the
// document, read from its top to the end of that line, fails with the same
// message. That is the line of the offending tab or indentation, or for a
// bracket or quote never closed, the line where it opened (every longer
// prefix fails the same way from there on).
//
// The search starts at yaml.v3's line, steps forward in doubling strides
// until a prefix fails the same way, then bisects, so it costs a few
// parses of prefixes of the file. Bisecting assumes that prefixes ending
// before the problem do not fail with the same message; a multi-line flow
// collection or quoted string that is closed on a later line, but fails
// with that message when cut at the end of one of its lines, can make the
// answer earlier than the problem. The search parses at most
// yamlSearchBudget bytes in all; past that the line is yaml.v3's.

// yamlSearchBudget bounds the bytes the line search parses in total, so a
// syntax error in a large policy costs a bounded time.
const yamlSearchBudget = 4 << 20

// syntaxError is the Error of a yaml.v3 error decoding data, with the
// line where the problem is (see above).
func syntaxError(data []byte, err error) *Error {
	e := yamlError(err)
	e.Line = syntaxLine(data, e.Msg, e.Line, prefixFails)
	return e
}

// syntaxLine returns the first line k, from reported on, such that the
// first document of data up to the end of line k fails with msg (a
// yamlError message; the whole of data does), or reported when the budget
// runs out or no such line is found. It asks prefixFails (which tests
// count the calls of) whether a prefix fails with msg.
func syntaxLine(data []byte, msg string, reported int, prefixFails func(prefix []byte, msg string) bool) int {
	var ends []int // ends[k-1]: the offset just past line k
	for off := 0; off < len(data); {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			off = len(data)
		} else {
			off += nl + 1
		}
		ends = append(ends, off)
	}
	n := len(ends)
	r := max(reported, 1)
	if r > n {
		return reported
	}
	budget := yamlSearchBudget
	// fails reports whether the prefix of k lines fails with msg; the
	// whole document does. ok is false when the budget is spent.
	fails := func(k int) (same, ok bool) {
		if k >= n {
			return true, true
		}
		if budget -= ends[k-1]; budget < 0 {
			return false, false
		}
		return prefixFails(data[:ends[k-1]], msg), true
	}
	same, ok := fails(r)
	switch {
	case !ok:
		return reported
	case same:
		return r
	}
	// Gallop: lo fails differently (or not at all), hi the same way.
	lo, hi := r, r
	for step := 1; ; step *= 2 {
		hi = min(lo+step, n)
		if same, ok = fails(hi); !ok {
			return reported
		} else if same {
			break
		}
		lo = hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if same, ok = fails(mid); !ok {
			return reported
		} else if same {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// prefixFails reports whether decoding the first document of prefix fails
// with msg.
func prefixFails(prefix []byte, msg string) (same bool) {
	defer func() {
		// yaml.v3 has panicked on hostile input; Parse guards the full
		// document the same way. A prefix that panics is not the
		// failure searched for.
		if recover() != nil {
			same = false
		}
	}()
	var n yaml.Node
	err := yaml.NewDecoder(bytes.NewReader(prefix)).Decode(&n)
	return err != nil && yamlError(err).Msg == msg
}
