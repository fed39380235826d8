package tiers

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/floodgate-go/floodgate/quota"
)

// validMethodPattern checks a match or methods pattern: "/..." or
// "VERB /...", and a valid path.Match glob.
func validMethodPattern(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	rest := s
	if s[0] != '/' {
		verb, p, ok := strings.Cut(s, " ")
		if !ok || verb == "" || !(upper(verb) || verb == "*") || !strings.HasPrefix(p, "/") {
			return fmt.Errorf("%q is neither a gRPC method (/pkg.Svc/Method) nor an HTTP route (GET /path)", s)
		}
		rest = p
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < 0x21 || rest[i] == 0x7f {
			return fmt.Errorf("%q contains a space or control character", s)
		}
	}
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob: %v", s, err)
	}
	return nil
}

func upper(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

func isGlob(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// limitOf builds and checks a Limit from a rate, burst and algorithm,
// reporting problems at ratePath and burstPath. ok is false when the limit
// is unusable.
func limitOf(rep *reporter, ratePath, burstPath string, rate Rate, burst int64, alg quota.Algorithm) (quota.Limit, bool) {
	if !alg.Known() {
		rep.addf(parentPath(ratePath)+".algorithm", "unknown algorithm %d", alg)
		return quota.Limit{}, false
	}
	if rate.Calendar != NoCalendar {
		rep.addf(ratePath, "a calendar rate (%s) is only for a rule's own rate and its overrides, not a tier's or one of several windows", rate)
		return quota.Limit{}, false
	}
	l := quota.Limit{Algorithm: alg, Rate: rate.N, Period: rate.Period, Burst: 1}
	if err := l.Validate(); err != nil {
		rep.add(ratePath, err.Error())
		return quota.Limit{}, false
	}
	windowed := alg != quota.TokenBucket && alg != quota.GCRA
	switch {
	case windowed && burst != 0:
		rep.addf(burstPath, "%s has no burst; remove burst (its capacity is the rate, %d)", alg, rate.N)
		return quota.Limit{}, false
	case windowed:
		l.Burst = 0
	case burst == 0:
		l.Burst = rate.N
	case burst < 1 || burst > quota.MaxRate:
		rep.addf(burstPath, "%d is out of range [1, %d]", burst, quota.MaxRate)
		return quota.Limit{}, false
	default:
		l.Burst = burst
	}
	return l, true
}

// keyValue checks an override key value for scope s (IP values are
// checked by parseNet).
func keyValue(v string) (string, error) {
	if v == "" {
		return "", errors.New("must not be empty")
	}
	return v, nil
}
